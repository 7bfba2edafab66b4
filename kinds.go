package dlock

import (
	"context"
	"fmt"

	"github.com/dlockgo/dlock/driver"
)

// The lock kinds besides the mutex: see the package doc, Kinds of lock.

// LeaderInfo describes the leader of an election: the value it campaigned
// with and its fencing token. The zero LeaderInfo means nobody leads.
type LeaderInfo = driver.LeaderInfo

// AcquireRead takes the readers-writer lock called name for reading,
// waiting as long as ctx allows: any number of readers hold it together
// while no writer does, and a writer already waiting goes first. Errors
// are those of Acquire.
func (l *Locker) AcquireRead(ctx context.Context, name string, opts ...Option) (*Lease, error) {
	return l.acquire(ctx, driver.Request{Name: name, Mode: driver.Read}, opts, true)
}

// TryAcquireRead makes one attempt to take the readers-writer lock called
// name for reading. It fails with ErrNotAcquired while a writer holds the
// lock or waits for it.
func (l *Locker) TryAcquireRead(ctx context.Context, name string, opts ...Option) (*Lease, error) {
	return l.acquire(ctx, driver.Request{Name: name, Mode: driver.Read}, opts, false)
}

// AcquireWrite takes the readers-writer lock called name for writing,
// waiting as long as ctx allows until no reader or writer holds it.
// Readers that arrive while it waits queue behind it, so a stream of
// readers cannot starve it. Errors are those of Acquire.
func (l *Locker) AcquireWrite(ctx context.Context, name string, opts ...Option) (*Lease, error) {
	return l.acquire(ctx, driver.Request{Name: name, Mode: driver.Write}, opts, true)
}

// TryAcquireWrite makes one attempt to take the readers-writer lock called
// name for writing. It fails with ErrNotAcquired while anyone holds it.
func (l *Locker) TryAcquireWrite(ctx context.Context, name string, opts ...Option) (*Lease, error) {
	return l.acquire(ctx, driver.Request{Name: name, Mode: driver.Write}, opts, false)
}

// AcquirePermit takes one of the limit permits of the semaphore called
// name, waiting as long as ctx allows: never more than limit leases of
// the semaphore are held at once. Every user of a semaphore must pass the
// same limit. A holder that crashes gives its permit back when its TTL or
// session ends. Errors are those of Acquire, and limit < 1 is an error.
func (l *Locker) AcquirePermit(ctx context.Context, name string, limit int, opts ...Option) (*Lease, error) {
	return l.acquirePermit(ctx, name, limit, opts, true)
}

// TryAcquirePermit makes one attempt to take a permit of the semaphore
// called name. It fails with ErrNotAcquired when all limit permits are
// held.
func (l *Locker) TryAcquirePermit(ctx context.Context, name string, limit int, opts ...Option) (*Lease, error) {
	return l.acquirePermit(ctx, name, limit, opts, false)
}

func (l *Locker) acquirePermit(ctx context.Context, name string, limit int, opts []Option, wait bool) (*Lease, error) {
	if limit < 1 {
		return nil, fmt.Errorf("dlock: semaphore %q: limit %d, want at least 1", name, limit)
	}
	return l.acquire(ctx, driver.Request{Name: name, Mode: driver.Permit, Limit: limit}, opts, wait)
}

// Campaign runs for leader of the election called name, with value as the
// candidate's identity for observers (an address, a host name), and waits
// as long as ctx allows until it leads. The returned lease is the
// leadership: its Done closes the moment leadership is lost, and Release
// resigns. Candidates are elected in order of arrival where the backend
// queues them.
func (l *Locker) Campaign(ctx context.Context, name, value string, opts ...Option) (*Lease, error) {
	return l.acquire(ctx, driver.Request{Name: name, Mode: driver.Leader, Value: value}, opts, true)
}

// TryCampaign makes one attempt to become leader of the election called
// name, as Campaign, without ever joining the queue. It fails with
// ErrNotAcquired while another candidate leads (and, where the backend
// queues candidates, while others wait ahead of it).
func (l *Locker) TryCampaign(ctx context.Context, name, value string, opts ...Option) (*Lease, error) {
	return l.acquire(ctx, driver.Request{Name: name, Mode: driver.Leader, Value: value}, opts, false)
}

// Leader returns the current leader of the election called name; the zero
// LeaderInfo when nobody leads.
func (l *Locker) Leader(ctx context.Context, name string) (LeaderInfo, error) {
	if err := l.checkElection(name); err != nil {
		return LeaderInfo{}, err
	}
	info, err := l.elector.Leader(ctx, name)
	if err != nil {
		return LeaderInfo{}, fmt.Errorf("dlock: leader of %q: %w", name, err)
	}
	return info, nil
}

// Observe follows the election called name: the returned channel gets
// the current leader first (the zero LeaderInfo when nobody leads), then
// every change, as the backend is notified of it. It is closed when ctx
// ends or the Locker closes. A reader that falls behind may miss
// intermediate leaders, never the latest.
func (l *Locker) Observe(ctx context.Context, name string) (<-chan LeaderInfo, error) {
	if err := l.checkElection(name); err != nil {
		return nil, err
	}
	ch, err := l.elector.Observe(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("dlock: observe %q: %w", name, err)
	}
	return ch, nil
}

func (l *Locker) checkElection(name string) error {
	if err := ValidateName(name); err != nil {
		return err
	}
	if leader := l.modes[driver.Leader]; !leader.ok {
		return fmt.Errorf("dlock: election %q on the %s backend: %w%s", name, l.backend, ErrUnsupported, leader.why)
	}
	if l.isClosed() {
		return ErrClosed
	}
	return nil
}
