// Package driver defines the small interface a dlock backend implements.
//
// Users never call a driver directly: they hold a *dlock.Locker, which
// validates names, generates owner values, waits, renews, detects loss,
// records metrics and logs, once for every backend. A backend only speaks
// its store's protocol.
//
// A driver is safe for concurrent use by multiple goroutines.
//
// Optional capabilities are separate interfaces found by type assertion,
// as in database/sql/driver: a driver that can wait efficiently for a lock
// (server-side blocking, pub/sub, watches) implements [Waiter].
package driver

import (
	"context"
	"strconv"
	"strings"
	"time"
)

// Request identifies one acquisition: the lock's name, the owner value
// that proves who holds it, and the lease's time to live.
type Request struct {
	// Name is the lock's name, already checked by dlock.ValidateName.
	Name string
	// Owner is unique to this acquisition: 128 random bits in hex. A driver
	// must renew and unlock only a lock whose stored owner equals Owner.
	Owner string
	// TTL is how long the store keeps the lock without a renew.
	TTL time.Duration
	// Mode is the kind of lock asked for; the zero value, Exclusive, is
	// the mutex. dlock sends another mode only to a driver whose
	// Supports(mode) is true (see Moder); Renew and Unlock get the
	// Request of the acquisition, mode included.
	Mode Mode
	// Limit is the number of permits of a semaphore (Mode Permit), at
	// least 1; zero in every other mode.
	Limit int
	// Value is what a candidate stores as its identity in an election
	// (Mode Leader), for observers to read; empty in every other mode.
	Value string
}

// NameByte reports whether c may occur in a lock name: an ASCII letter or
// digit, or one of - _ . : @ + = /. It is the character rule of
// dlock.ValidateName, for drivers that check a name prefix (Inspect)
// without a whole name to validate.
func NameByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("-_.:@+=/", c) >= 0
}

// Grant describes a lock a driver has just taken.
type Grant struct {
	// Token is the fencing token: strictly greater than every token granted
	// before for the same name on the same store.
	Token uint64
	// Expires is the latest instant, on the local clock, at which the lock
	// is certainly still held: counted from when the request that took it
	// was sent (not when the reply came), less any clock-drift allowance.
	// The zero time means the lock does not expire on its own (it lives
	// with the session or process) and needs no renewal.
	Expires time.Time
	// OnLost, if not nil, is how the driver tells dlock that the lock is
	// gone (session expired, connection closed, key deleted behind the
	// holder's back): dlock calls it once, right after the grant, with a
	// function for the driver to call (once, from any goroutine, holding
	// none of the driver's locks) on learning of the loss — at once, on
	// another goroutine, if it already knows. Calls after Unlock are
	// ignored. A LossNotice implements both sides. A session-based driver
	// tells every lock of the session from the session's own goroutine: a
	// held lock costs no goroutine.
	OnLost func(lost func())
	// Check, if not nil, tells at once whether the lock may still be held
	// at now: nil while it may, else why not (the session's conservative
	// validity ended, the server closed the lock's connection), and so on
	// ever after. dlock calls it on every Lease.Err, so that a holder's
	// first look after a loss says "lost" before the driver's goroutines
	// have run: it must not block, nor allocate while it returns nil
	// (clock comparisons, atomic loads, at most one non-blocking look at a
	// socket; no round trip). A driver whose Check can fail must also call
	// the OnLost function (or let Expires pass) on the same condition, so
	// that Done closes without a caller.
	Check func(now time.Time) error
}

// Driver is the interface every backend implements.
type Driver interface {
	// TryLock makes one attempt to take the lock. When another owner holds
	// it, TryLock returns an error for which errors.Is(err, ErrNotAcquired)
	// is true, preferably a *HeldError telling how long the holder's lock
	// has left. It must leave nothing held when it returns an error.
	TryLock(ctx context.Context, r Request) (Grant, error)

	// Renew extends the lock to r.TTL from now, only if r.Owner still
	// holds it, and returns the new expiry (see Grant.Expires). It returns
	// an error wrapping ErrNotHeld when the lock is gone or held by another
	// owner; any other error is taken as transient and retried.
	Renew(ctx context.Context, r Request) (time.Time, error)

	// Unlock releases the lock only if r.Owner holds it. It returns an
	// error wrapping ErrNotHeld when the lock was not held by r.Owner.
	Unlock(ctx context.Context, r Request) error

	// Close releases the driver's resources (connections, subscriptions).
	Close() error
}

// Mode is the kind of lock a Request asks for.
//
// Each kind of lock has names of its own: the mutex "x", the
// readers-writer lock "x", the semaphore "x" and the election "x" are four
// unrelated locks, and a driver keeps them apart in its store. Read and
// Write are the two sides of the same readers-writer lock.
type Mode uint8

const (
	// Exclusive is the mutex: one holder at a time.
	Exclusive Mode = iota
	// Read is the shared side of a readers-writer lock: any number of
	// readers hold it together while no writer does, and a waiting writer
	// blocks later readers (no writer starvation). Where the store queues
	// waiters, they are served in arrival order, consecutive readers together.
	Read
	// Write is the exclusive side of a readers-writer lock: one writer and
	// no reader.
	Write
	// Permit is one permit of a semaphore: at most Request.Limit holders
	// at a time. Waiters are served in order of arrival where the store
	// allows it.
	Permit
	// Leader is leadership of an election: a mutex whose holder's
	// Request.Value can be read by observers (see Elector).
	Leader
)

var modeNames = [...]string{Exclusive: "exclusive", Read: "read", Write: "write", Permit: "permit", Leader: "leader"}

// String returns the mode's name, as used in errors and logs.
func (m Mode) String() string {
	if int(m) < len(modeNames) {
		return modeNames[m]
	}
	return "mode(" + strconv.Itoa(int(m)) + ")"
}

// Moder is implemented by drivers that support modes besides Exclusive.
// Without it a driver has Exclusive only: dlock answers requests for
// other modes with ErrUnsupported without calling it.
//
// For every mode it supports, a driver's TryLock, Lock (if it is a
// Waiter), Renew and Unlock follow the contract of the Exclusive mode,
// tokens included: every grant of a name, in any of the name's modes,
// carries a token greater than every earlier grant's for that name and
// kind of lock (readers holding together have distinct tokens).
//
// A driver whose modes depend on how it was configured may also implement
// Unsupporter, to say why it lacks a mode. dlock asks both about every
// mode once, when the Locker is made: the answers must not change.
type Moder interface {
	// Supports reports whether the driver implements mode m.
	Supports(m Mode) bool
}

// Unsupporter is implemented by drivers whose modes depend on how they
// were configured (a layout that lacks a kind of lock): dlock adds the
// reason to the ErrUnsupported error of a request for a mode the driver
// lacks.
type Unsupporter interface {
	// UnsupportedReason returns why the driver lacks mode m, "" if it has it.
	UnsupportedReason(m Mode) string
}

// Schemer is implemented by drivers that name their backend, as the
// scheme of the URLs that open it ("redis", "zk"): dlock uses the name in
// its metrics and logs, and "custom" for a driver without one.
type Schemer interface {
	// Scheme returns the backend's name.
	Scheme() string
}

// LeaderInfo describes the leader of an election.
type LeaderInfo struct {
	// Value is the value the leader campaigned with.
	Value string
	// Token is the leader's fencing token; 0 means there is no leader.
	Token uint64
}

// Elector is implemented by drivers that support Mode Leader: besides
// taking leadership with Lock (campaign), Renew and Unlock (resign),
// they let anyone read and follow who leads.
type Elector interface {
	// Leader returns the current leader of election name; zero if nobody.
	Leader(ctx context.Context, name string) (LeaderInfo, error)

	// Observe sends the leader of election name on the returned channel:
	// the current one first (the zero LeaderInfo when nobody leads), then
	// each change, learnt by notification (watch, pub/sub), not by
	// polling on a timer. Consecutive values differ. The channel is closed
	// when ctx ends or the driver closes; a reader that falls behind may
	// miss intermediate leaders but always receives the latest.
	Observe(ctx context.Context, name string) (<-chan LeaderInfo, error)
}

// Resumer is implemented by drivers whose locks live on the store
// independently of the connection or process that took them (a key with
// a TTL), so that another process, given the acquisition's Request, can
// carry on holding the lock: dlock's Locker.Resume.
type Resumer interface {
	// Resume checks that r.Owner holds r.Name in r.Mode and renews the
	// lock to r.TTL, as Renew does, and returns its grant with the new
	// expiry (Token left zero: the caller knows it). When r.Owner does not
	// hold the lock, Resume returns an error wrapping ErrNotHeld and
	// changes nothing on the store.
	Resume(ctx context.Context, r Request) (Grant, error)
}

// ResumeByRenew is Resume for a driver whose Renew already checks the
// owner and renews the lock: the grant of the renewed expiry.
func ResumeByRenew(ctx context.Context, d Driver, r Request) (Grant, error) {
	exp, err := d.Renew(ctx, r)
	if err != nil {
		return Grant{}, err
	}
	return Grant{Expires: exp}, nil
}

// Waiter is implemented by drivers that can wait for a lock without polling
// on a timer: by notification, watch or server-side blocking.
type Waiter interface {
	// Lock takes the lock, waiting as long as ctx allows. When ctx ends
	// first, Lock returns ctx's error (possibly joined with a cause) and
	// leaves nothing held and nothing queued on the store.
	Lock(ctx context.Context, r Request) (Grant, error)
}

// Opener opens a driver from a URL. It is what a backend registers with
// dlock.Register for its scheme. The URL's query holds only the backend's
// own parameters: dlock removes its shared ones (ttl, renew) first. An
// opener must reject a parameter it does not know with a *ParamError.
type Opener func(ctx context.Context, u URL) (Driver, error)
