package locktest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/internal/testenv"
)

// A BackgroundRelease is the body of a test of a backend whose release
// goes on in the background when its context ends while the lock's
// connection is busy: see Run.
type BackgroundRelease struct {
	// Packages are the import paths of the backend and of the internal
	// packages that run its goroutines: none of their goroutines may be
	// left after Close.
	Packages []string
	// Open opens a new Locker on the backend, with occupy, which keeps the
	// connection holding owner's lock busy until free is called, and held,
	// which reports whether the server has name's lock held by anyone.
	Open func(t *testing.T) (l *dlock.Locker, occupy func(owner string) (free func()), held func(name string) bool)
}

// Run checks, 5 times, that Close waits for such a release: a Release
// whose 50 ms context ends while the connection is occupied returns an
// error and goes on waiting for the connection; once the connection is
// free, Close returns only after the release: the lock is free on the
// server and no goroutine of the backend's package is left.
func (c BackgroundRelease) Run(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i := range 5 {
		before := testenv.Goroutines(c.Packages...)
		l, occupy, held := c.Open(t)
		name := fmt.Sprintf("close-bg/%d-%d", time.Now().UnixNano(), i)
		lease, err := l.Acquire(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		// Freed at the latest when the test ends, before the Locker's
		// Close, which a connection occupied for ever would hold up.
		free := sync.OnceFunc(occupy(lease.Owner()))
		t.Cleanup(free)
		rctx, rcancel := context.WithTimeout(ctx, 50*time.Millisecond)
		err = lease.Release(rctx)
		rcancel()
		if err == nil {
			t.Fatal("Release with the connection occupied succeeded")
		}
		// The release, waiting for the connection, gets it as it is
		// freed, before Close can.
		if !Eventually(10*time.Second, func() bool { return c.releaseWaiting(before) }) {
			t.Fatalf("run %d: no release waiting for the connection", i)
		}
		free()
		if err := l.Close(); err != nil {
			t.Fatalf("run %d: Close: %v", i, err)
		}
		if left := testenv.NewGoroutines(before, c.Packages...); left != "" {
			t.Fatalf("run %d: goroutines of the driver left after Close:\n%s", i, left)
		}
		if held(name) {
			t.Fatalf("run %d: the lock is held on the server after Close", i)
		}
	}
}

// releaseWaiting reports whether a release started since before waits
// for its connection: a goroutine of the backend's release blocked in
// its session's Take.
func (c BackgroundRelease) releaseWaiting(before map[int64]string) bool {
	for id, s := range testenv.Goroutines(c.Packages...) {
		if _, ok := before[id]; !ok && strings.Contains(s, ").release") && strings.Contains(s, ").Take(") &&
			(strings.Contains(s, "[select") || strings.Contains(s, "[chan send")) {
			return true
		}
	}
	return false
}
