package pglock_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/pglock"
)

const pkgPath = "github.com/dlockgo/dlock/pglock"

// TestCloseWaitsForBackgroundRelease: a release that outlived its context
// (the lock's connection was busy) goes on in the background, and Close
// waits for it: when Close returns, the lock is free on the server and no
// goroutine of the driver is left (the release's included, which closes
// the connection the release left with nothing, and the keeper's).
func TestCloseWaitsForBackgroundRelease(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	adm := newAdmin(t)
	for i := range 5 {
		before := testenv.Goroutines(pkgPath)
		d := newDriver(t, pglock.Options{MaxIdle: -1})
		l, err := dlock.New(d)
		if err != nil {
			t.Fatal(err)
		}
		name := "close-bg/" + randomHex(4)
		lease, err := l.Acquire(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		free := pglock.Occupy(d, lease.Owner())
		rctx, rcancel := context.WithTimeout(ctx, 50*time.Millisecond)
		err = lease.Release(rctx)
		rcancel()
		if err == nil {
			t.Fatal("Release with the connection occupied succeeded")
		}
		// The release, waiting for the connection, gets it as it is
		// freed, before Close can.
		if !waitUntil(10*time.Second, func() bool { return waitingRelease(before) }) {
			t.Fatalf("run %d: no release waiting for the connection", i)
		}
		free()
		if err := l.Close(); err != nil {
			t.Fatalf("run %d: Close: %v", i, err)
		}
		if left := testenv.NewGoroutines(before, pkgPath); left != "" {
			t.Fatalf("run %d: goroutines of the driver left after Close:\n%s", i, left)
		}
		if h, _ := adm.lockRows(t, table, name); len(h) != 0 {
			t.Fatalf("run %d: holders %v after Close, want none", i, h)
		}
	}
}

// waitingRelease reports whether a release started since before waits for
// its connection.
func waitingRelease(before map[int64]string) bool {
	for id, s := range testenv.Goroutines(pkgPath) {
		if _, ok := before[id]; !ok && strings.Contains(s, "[chan send") && strings.Contains(s, "(*hold).release") {
			return true
		}
	}
	return false
}
