package dlock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
)

// AcquireAll takes the mutexes called names, all or nothing, waiting as
// long as ctx allows. It takes them one by one in a single canonical
// order — sorted, duplicates removed — whatever order names comes in, so
// that two callers locking {a, b} and {b, a} cannot deadlock each other.
// Every name is validated before any is taken. When one acquisition fails
// or ctx ends, AcquireAll releases what it took and returns the error
// (ctx's error, wrapped, when ctx ended), leaving nothing held. The
// options apply to every part. An empty names is an error.
func (l *Locker) AcquireAll(ctx context.Context, names []string, opts ...Option) (*MultiLease, error) {
	return l.acquireAll(ctx, names, opts, l.Acquire)
}

// TryAcquireAll makes one attempt at each of the mutexes called names, in
// the canonical order of AcquireAll. If any is held by another owner, it
// releases those it took and returns an error matching ErrNotAcquired:
// nothing stays held.
func (l *Locker) TryAcquireAll(ctx context.Context, names []string, opts ...Option) (*MultiLease, error) {
	return l.acquireAll(ctx, names, opts, l.TryAcquire)
}

type acquireFunc func(ctx context.Context, name string, opts ...Option) (*Lease, error)

func (l *Locker) acquireAll(ctx context.Context, names []string, opts []Option, acquire acquireFunc) (*MultiLease, error) {
	sorted, err := canonical(names)
	if err != nil {
		return nil, err
	}
	parts := make([]*Lease, 0, len(sorted))
	for _, name := range sorted {
		lease, err := acquire(ctx, name, opts...)
		if err != nil {
			// The caller's ctx may be over: release on a context of our own.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeReleaseTimeout)
			for _, p := range slices.Backward(parts) {
				_ = p.Release(rctx)
			}
			cancel()
			return nil, fmt.Errorf("dlock: acquire all of %q: %w", sorted, err)
		}
		parts = append(parts, lease)
	}
	m := &MultiLease{names: sorted, parts: parts}
	m.ctx, m.cancel = context.WithCancelCause(context.Background())
	return m, nil
}

// canonical returns names sorted, without duplicates, after checking each.
func canonical(names []string) ([]string, error) {
	if len(names) == 0 {
		return nil, errors.New("dlock: acquire all: no names")
	}
	for _, name := range names {
		if err := ValidateName(name); err != nil {
			return nil, err
		}
	}
	sorted := slices.Clone(names)
	slices.Sort(sorted)
	return slices.Compact(sorted), nil
}

// A MultiLease holds a set of mutexes taken together by AcquireAll or
// TryAcquireAll: one Lease per name, each renewed and supervised as a
// single lease is. The set is held while every part is: Done closes when
// any part ends, released or lost, and Release releases them all.
//
// From the first call of Done or Context until the set ends (released,
// a part lost, or the Locker closed), a MultiLease has one goroutine that
// waits for its parts to end; otherwise it costs none.
//
// A MultiLease is safe for concurrent use. It must not be copied.
type MultiLease struct {
	names []string // sorted
	parts []*Lease // parts[i] holds names[i]

	// ctx is cancelled, with the set's end cause, when the first part ends
	// or Release has released them all; its Done is the MultiLease's.
	ctx    context.Context
	cancel context.CancelCauseFunc

	watching sync.Once // starts watch, on the first call of Done or Context

	mu        sync.Mutex
	releasing bool
	err       error // nil while held
}

// watch ends the set when its first part ends. It returns then, or once
// Release has started; Release ends every part, so watch never outlives
// the set.
func (m *MultiLease) watch() {
	switch len(m.parts) {
	case 1:
		<-m.parts[0].Done()
	case 2:
		select {
		case <-m.parts[0].Done():
		case <-m.parts[1].Done():
		}
	default:
		cases := make([]reflect.SelectCase, len(m.parts))
		for i, p := range m.parts {
			cases[i] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(p.Done())}
		}
		reflect.Select(cases)
	}
	m.endIfPartEnded()
}

// endIfPartEnded ends the set if a part has ended, unless Release is
// under way (it ends the set itself when every part is released).
func (m *MultiLease) endIfPartEnded() {
	m.mu.Lock()
	releasing := m.releasing
	m.mu.Unlock()
	if releasing {
		return
	}
	for _, p := range m.parts {
		if p.Err() != nil {
			m.end(m.cause())
			return
		}
	}
}

// cause returns why the set ended: the first lost part's Err (in name
// order), else the first ended part's.
func (m *MultiLease) cause() error {
	var first error
	for _, p := range m.parts {
		err := p.Err()
		if errors.Is(err, ErrLost) {
			return err
		}
		if first == nil {
			first = err
		}
	}
	return cmp.Or(first, ErrReleased)
}

// end records the set's end cause once and closes Done.
func (m *MultiLease) end(cause error) {
	m.mu.Lock()
	if m.err != nil {
		m.mu.Unlock()
		return
	}
	m.err = cause
	m.mu.Unlock()
	m.cancel(cause)
}

// Names returns the names of the set, sorted, without duplicates.
func (m *MultiLease) Names() []string { return slices.Clone(m.names) }

// Leases returns the set's leases, in the order of Names.
func (m *MultiLease) Leases() []*Lease { return slices.Clone(m.parts) }

// Lease returns the lease of the lock called name, nil if not in the set.
func (m *MultiLease) Lease(name string) *Lease {
	if i, ok := slices.BinarySearch(m.names, name); ok {
		return m.parts[i]
	}
	return nil
}

// Token returns the fencing token of the lock called name (each lock of
// the set has its own); 0 if name is not in the set.
func (m *MultiLease) Token(name string) uint64 {
	if p := m.Lease(name); p != nil {
		return p.Token()
	}
	return 0
}

// Done returns a channel that is closed when the set is no longer held
// as a whole: when any part is lost or released (by Release, or on its
// own through Lease).
func (m *MultiLease) Done() <-chan struct{} {
	m.watching.Do(func() { go m.watch() })
	return m.ctx.Done()
}

// Err returns nil while every part is held; afterwards why the set ended:
// an error matching ErrLost if a part was lost (the first in name order,
// when several were), else one matching ErrReleased.
func (m *MultiLease) Err() error {
	m.endIfPartEnded() // Done may never have been called
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.err
}

// Context returns a copy of parent that is cancelled when the set ends,
// with its Err as the cause, or when parent ends, as Lease.Context does
// for a lease.
func (m *MultiLease) Context(parent context.Context) (context.Context, context.CancelFunc) {
	return newHeldContext(parent, m.Done(), m.Err)
}

// Renew extends every part to its TTL from now (see Lease.Renew) and
// returns the parts' errors joined.
func (m *MultiLease) Renew(ctx context.Context) error {
	var errs []error
	for _, p := range m.parts {
		errs = append(errs, p.Renew(ctx))
	}
	return errors.Join(errs...)
}

// Release releases every part, in the reverse of the order they were
// taken, and ends the set: with ErrReleased, or with ErrLost if a part
// turns out to have been lost. It returns the parts' errors joined (see
// Lease.Release); releasing a set that already ended returns an error
// matching ErrNotHeld.
func (m *MultiLease) Release(ctx context.Context) error {
	m.mu.Lock()
	if m.releasing {
		cause := m.err
		m.mu.Unlock()
		if cause == nil {
			cause = ErrReleased // the first Release is still running
		}
		return fmt.Errorf("%w: %w", ErrNotHeld, cause)
	}
	m.releasing = true
	m.mu.Unlock()
	var errs []error
	for _, p := range slices.Backward(m.parts) {
		errs = append(errs, p.Release(ctx))
	}
	m.end(m.cause())
	return errors.Join(errs...)
}
