package dlock

import (
	"errors"
	"fmt"

	"github.com/dlockgo/dlock/driver"
)

// Sentinel errors. Compare with errors.Is: dlock wraps them with context and
// keeps the backend's cause.
var (
	// ErrNotAcquired is returned by TryAcquire when another owner holds
	// the lock. The error is often a *HeldError with more detail.
	ErrNotAcquired = driver.ErrNotAcquired
	// ErrNotHeld is returned by Release and Renew when the caller no
	// longer holds the lock: it was released before, lost, or expired. The
	// error also matches ErrReleased or ErrLost, whichever ended the lease.
	ErrNotHeld = driver.ErrNotHeld
	// ErrLost is a lease's Err once its lock was lost: a renewal found it
	// gone or could not succeed before it expired, the session ended, or
	// the store took it away.
	ErrLost = driver.ErrLost
	// ErrReleased is a lease's Err once its holder released it.
	ErrReleased = driver.ErrReleased
	// ErrInvalidName means a lock name breaks the rules of ValidateName.
	ErrInvalidName = driver.ErrInvalidName
	// ErrUnsupported means the backend cannot do what was asked.
	ErrUnsupported = driver.ErrUnsupported
	// ErrClosed means the Locker was closed.
	ErrClosed = driver.ErrClosed
	// ErrMaxHold is a lease's Err, with ErrLost, once it was held for the
	// time WithMaxHold allows; Resume returns it past a handle's deadline.
	ErrMaxHold = errors.New("dlock: the lease reached its maximum hold time")
	// ErrNoQuorum means too few nodes of a multi-node backend (Redlock)
	// answered in time to decide.
	ErrNoQuorum = driver.ErrNoQuorum
	// ErrDetached is a lease's Err, with ErrReleased, once Detach handed it on.
	ErrDetached = fmt.Errorf("%w: handed on by Detach", ErrReleased)
	// ErrBadHandle means a text is not a Handle dlock wrote (ParseHandle),
	// or names another backend than the Locker's (Resume).
	ErrBadHandle = errors.New("dlock: not a lock handle")
)

// HeldError reports that a lock is held by another owner, and for how long
// the holder's lock has left. errors.Is(err, ErrNotAcquired) is true for it.
type HeldError = driver.HeldError

// ParamError reports a bad URL parameter given to Open, naming it.
type ParamError = driver.ParamError
