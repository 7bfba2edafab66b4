package mysqllock_test

import (
	"context"
	"testing"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/locktest"
	"github.com/dlockgo/dlock/mysqllock"
)

// suiteTTL is the conformance runs' TTL, and so the session wait_timeout
// of their locks' connections: a holder that goes silent loses its lock
// that long after the server last heard from it.
const suiteTTL = 2 * time.Second

// runSuite runs the conformance suite with clients from newLocker.
// TakeAway kills the holder's connection, found with IS_USED_LOCK, and
// waits until the server has ended it: KILL returns before the killed
// connection's locks are free, and the holder's other locks, on the same
// session, go with it (the suite's MultiLostPart then expects the other
// part of a set free after its Release); Crash
// stops the client's keep-alive checks for good, as a host that vanished
// would: the server closes the silent connection after its wait_timeout,
// which frees the lock.
func runSuite(t *testing.T, newLocker func(t *testing.T, opts ...dlock.Option) *dlock.Locker) {
	runSuiteAs(t, newAdmin(t), newLocker)
}

// runSuiteAs is runSuite with the admin connection of another server.
func runSuiteAs(t *testing.T, adm *admin, newLocker func(t *testing.T, opts ...dlock.Option) *dlock.Locker) {
	names, err := mysqllock.NewDriver(adm.db, nil)
	if err != nil {
		t.Fatal(err)
	}
	locktest.Run(t, locktest.Harness{
		NewLocker: newLocker,
		TakeAway: func(t *testing.T, name string) {
			t.Helper()
			a := &admin{t: t, db: adm.db}
			id := a.holder(names.LockName(name))
			if id == 0 {
				t.Fatalf("TakeAway(%q): nobody holds it", name)
			}
			a.kill(id)
			if !eventually(5*time.Second, func() bool { return !a.alive(id) }) {
				t.Fatalf("TakeAway(%q): connection %d still on the server 5s after KILL", name, id)
			}
		},
		TTL: suiteTTL,
		Crash: func(t *testing.T, l *dlock.Locker) {
			l.Driver().(*mysqllock.Driver).Freeze(3 * suiteTTL)
		},
	})
}

// TestConformance runs the suite with clients built by New on a *sql.DB
// of their own, which the driver treats as the caller's pool.
func TestConformance(t *testing.T) {
	o := mysqllock.Options{Table: testTable(t), KeepAlive: 200 * time.Millisecond}
	runSuite(t, func(t *testing.T, opts ...dlock.Option) *dlock.Locker {
		l, _ := newLocker(t, o, opts...)
		return l
	})
}

// TestConformanceURL runs the suite with clients opened from mysql://
// URLs, which own their pools (Options.ExclusivePool).
func TestConformanceURL(t *testing.T) {
	url := serverURL(t, "table="+testTable(t)+"&keepalive=200ms&ttl="+suiteTTL.String())
	runSuite(t, func(t *testing.T, opts ...dlock.Option) *dlock.Locker {
		l, err := dlock.Open(context.Background(), url, opts...)
		if err != nil {
			t.Fatal(err)
		}
		return l
	})
}

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
