package mysqllock_test

import (
	"testing"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/locktest"
	"github.com/dlockgo/dlock/mysqllock"
)

// TestCloseWaitsForBackgroundRelease: a release that outlived its context
// (the lock's connection was busy) goes on in the background, and Close
// waits for it, including the goroutine that gives back the connection
// the release left with nothing.
func TestCloseWaitsForBackgroundRelease(t *testing.T) {
	adm := newAdmin(t)
	locktest.BackgroundRelease{
		Packages: []string{"github.com/dlockgo/dlock/mysqllock", "github.com/dlockgo/dlock/internal/sqlsession"},
		Open: func(t *testing.T) (*dlock.Locker, func(string) func(), func(string) bool) {
			l, d := newLocker(t, mysqllock.Options{})
			occupy := func(owner string) func() { return mysqllock.Occupy(d, owner) }
			held := func(name string) bool { return adm.holder(d.LockName(name)) != 0 }
			return l, occupy, held
		},
	}.Run(t)
}
