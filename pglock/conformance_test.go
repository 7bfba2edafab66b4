package pglock_test

import (
	"testing"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/locktest"
	"github.com/dlockgo/dlock/pglock"
)

// suiteTTL is the conformance suite's TTL. A session lock has no TTL: here
// it sets the keep-alive interval of held locks (a third of it), hence how
// soon a holder learns that its connection is gone.
const suiteTTL = time.Second

func TestConformance(t *testing.T) {
	adm := newAdmin(t)
	locktest.Run(t, locktest.Harness{
		NewLocker: func(t *testing.T, opts ...dlock.Option) *dlock.Locker {
			return newLocker(t, pglock.Options{}, opts...)
		},
		TakeAway: func(t *testing.T, name string) {
			t.Helper()
			adm.terminate(t, table, name)
		},
		TTL: suiteTTL,
		Crash: func(t *testing.T, l *dlock.Locker) {
			pglock.Crash(l.Driver().(*pglock.Driver))
		},
	})
}
