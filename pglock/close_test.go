package pglock_test

import (
	"testing"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/locktest"
	"github.com/dlockgo/dlock/pglock"
)

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
