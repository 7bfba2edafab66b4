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
	"time"
)

// Request identifies one acquisition: the lock's name, the owner value
// that proves who holds it, and the lease's time to live.
type Request struct {
	// Name is the lock's name, already checked by dlock.ValidateName.
	Name string
	// Owner is unique to this acquisition: 128 random bits in hex. A driver
	// must refresh and unlock only a lock whose stored owner equals Owner.
	Owner string
	// TTL is how long the store keeps the lock without a refresh.
	TTL time.Duration
}

// Grant describes a lock a driver has just taken.
type Grant struct {
	// Token is the fencing token: strictly greater than every token granted
	// before for the same name on the same store.
	Token uint64
	// Expires is the latest instant, on the local clock, at which the lock
	// is certainly still held. A driver computes it conservatively: from
	// the instant it sent the request that took the lock (not when the reply
	// came), less any clock-drift allowance. The zero time means the lock
	// does not expire on its own (it is held as long as the session or
	// process lives) and needs no renewal.
	Expires time.Time
	// Lost, if not nil, is closed by the driver when it learns that the lock
	// is gone (session expired, connection closed). dlock watches it only
	// while the lease is held, so a driver need not close it after Unlock.
	Lost <-chan struct{}
}

// Driver is the interface every backend implements.
type Driver interface {
	// TryLock makes one attempt to take the lock. When another owner holds
	// it, TryLock returns an error for which errors.Is(err, ErrNotAcquired)
	// is true, preferably a *HeldError telling how long the holder's lock
	// has left. It must leave nothing held when it returns an error.
	TryLock(ctx context.Context, r Request) (Grant, error)

	// Refresh extends the lock to r.TTL from now, only if r.Owner still
	// holds it, and returns the new expiry (see Grant.Expires). It returns
	// an error wrapping ErrNotHeld when the lock is gone or held by another
	// owner; any other error is taken as transient and retried.
	Refresh(ctx context.Context, r Request) (time.Time, error)

	// Unlock releases the lock only if r.Owner holds it. It returns an
	// error wrapping ErrNotHeld when the lock was not held by r.Owner.
	Unlock(ctx context.Context, r Request) error

	// Close releases the driver's resources (connections, subscriptions).
	Close() error
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
