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

// TestCloseWaitsForBackgroundRelease: a release that outlived its context
// (the lock's connection was busy) goes on in the background, and Close
// waits for it, including the goroutines that close the connection the
// release left with nothing, and the keeper's.
func TestCloseWaitsForBackgroundRelease(t *testing.T) {
	adm := newAdmin(t)
	locktest.BackgroundRelease{
		Packages: []string{"github.com/dlockgo/dlock/pglock", "github.com/dlockgo/dlock/internal/sqlsession"},
		Open: func(t *testing.T) (*dlock.Locker, func(string) func(), func(string) bool) {
			d := newDriver(t, pglock.Options{MaxIdle: -1})
			l, err := dlock.New(d)
			if err != nil {
				t.Fatal(err)
			}
			occupy := func(owner string) func() { return pglock.Occupy(d, owner) }
			held := func(name string) bool { h, _ := adm.lockRows(t, table, name); return len(h) != 0 }
			return l, occupy, held
		},
	}.Run(t)
}
