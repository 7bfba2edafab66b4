package redlock

import (
	"testing"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/locktest"
)

// TestConformance runs dlock's conformance suite over five redis-servers
// of the test's own; each Locker has its own clients, as another process
// would.
func TestConformance(t *testing.T) {
	c := newCluster(t, 5)
	locktest.Run(t, locktest.Harness{
		NewLocker: func(t *testing.T, opts ...dlock.Option) *dlock.Locker {
			return c.locker(t, nil, opts...)
		},
		TakeAway: func(t *testing.T, name string) { c.takeAway(t, name) },
	})
}
