package driver

import (
	"errors"
	"fmt"
	"time"
)

// The sentinel errors shared by dlock and every driver. Package dlock
// re-exports them; users compare with errors.Is.
var (
	// ErrNotAcquired means the lock is held by another owner.
	ErrNotAcquired = errors.New("dlock: not acquired")
	// ErrNotHeld means the caller does not hold the lock (any more).
	ErrNotHeld = errors.New("dlock: not held")
	// ErrLost means a held lock was lost: renewal failed, the session
	// expired or the lock was taken away on the store.
	ErrLost = errors.New("dlock: lost")
	// ErrReleased means the lease was released by its holder.
	ErrReleased = errors.New("dlock: released")
	// ErrInvalidName means a lock name breaks the rules of dlock.ValidateName.
	ErrInvalidName = errors.New("dlock: invalid name")
	// ErrUnsupported means the backend cannot do what was asked.
	ErrUnsupported = errors.New("dlock: unsupported")
	// ErrClosed means the Locker or driver was closed.
	ErrClosed = errors.New("dlock: closed")
	// ErrNoQuorum means too few nodes of a multi-node backend answered.
	ErrNoQuorum = errors.New("dlock: no quorum")
)

// HeldError reports that a lock is held by another owner. errors.Is(err,
// ErrNotAcquired) is true for it.
type HeldError struct {
	// Name is the lock's name.
	Name string
	// Remaining is how long the holder's lock has left before it expires
	// unless renewed, as the store reported it; 0 when unknown or unbounded.
	Remaining time.Duration
}

// Error describes the held lock and, when known, the holder's remaining time.
func (e *HeldError) Error() string {
	if e.Remaining > 0 {
		return fmt.Sprintf("dlock: not acquired: %q is held (expires in %v unless renewed)", e.Name, e.Remaining)
	}
	return fmt.Sprintf("dlock: not acquired: %q is held", e.Name)
}

// Is makes errors.Is(err, ErrNotAcquired) true.
func (e *HeldError) Is(target error) bool { return target == ErrNotAcquired }

// ParamError reports a bad URL parameter. It names the parameter.
type ParamError struct {
	// Scheme is the URL's scheme.
	Scheme string
	// Param is the offending query parameter (or URL part, like "host").
	Param string
	// Value is the value that was given.
	Value string
	// Err says what is wrong with it.
	Err error
}

// Error names the scheme, the parameter, its value and what is wrong.
func (e *ParamError) Error() string {
	if e.Value == "" {
		return fmt.Sprintf("dlock: %s URL: parameter %q: %v", e.Scheme, e.Param, e.Err)
	}
	return fmt.Sprintf("dlock: %s URL: parameter %q=%q: %v", e.Scheme, e.Param, e.Value, e.Err)
}

// Unwrap returns what is wrong with the parameter.
func (e *ParamError) Unwrap() error { return e.Err }
