package driver

import (
	"context"
	"time"
)

// LockInfo describes a held lock, as an Inspector sees it.
type LockInfo struct {
	// Name is the lock's name.
	Name string
	// Mode is the kind of lock held.
	Mode Mode
	// Token is the holder's fencing token; 0 when the backend cannot tell.
	Token uint64
	// Owner identifies the holder as far as the backend can tell: the
	// owner value, a session or a process ("pid 1234"); empty when unknown.
	Owner string
	// Expires is when the lock expires unless renewed, on the local clock;
	// the zero time when it does not expire on its own (it is held while a
	// session or process lives) or the backend cannot tell.
	Expires time.Time
	// Waiters is how many clients wait for the lock; -1 when unknown.
	Waiters int
}

// Inspector is implemented by drivers that can list the locks held on
// their store, for tools such as `dlock status`; callers report its
// absence as ErrUnsupported.
type Inspector interface {
	// Inspect returns the locks held now whose names start with prefix
	// (all of them for an empty prefix), sorted by name. It is a snapshot:
	// locks may be taken and released while it runs.
	Inspect(ctx context.Context, prefix string) ([]LockInfo, error)
}
