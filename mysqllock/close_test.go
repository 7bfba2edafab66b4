package mysqllock_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/mysqllock"
)

const pkgPath = "github.com/dlockgo/dlock/mysqllock"

// TestCloseWaitsForBackgroundRelease: a release that outlived its context
// (the lock's connection was busy) goes on in the background, and Close
// waits for it: when Close returns, the lock is free on the server and no
// goroutine of the driver is left (the release's included, which gives
// back the connection the release left with nothing).
func TestCloseWaitsForBackgroundRelease(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	adm := newAdmin(t)
	for i := range 5 {
		before := testenv.Goroutines(pkgPath)
		l, d := newLocker(t, mysqllock.Options{})
		name := "close-bg/" + randomHex(4)
		lease, err := l.Acquire(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		free := mysqllock.Occupy(d, lease.Owner())
		rctx, rcancel := context.WithTimeout(ctx, 50*time.Millisecond)
		err = lease.Release(rctx)
		rcancel()
		if err == nil {
			t.Fatal("Release with the connection occupied succeeded")
		}
		// The release, waiting for the connection, gets it as it is
		// freed, before Close can.
		if !waitFor(10*time.Second, func() bool { return waitingRelease(before) }) {
			t.Fatalf("run %d: no release waiting for the connection", i)
		}
		free()
		if err := l.Close(); err != nil {
			t.Fatalf("run %d: Close: %v", i, err)
		}
		if left := testenv.NewGoroutines(before, pkgPath); left != "" {
			t.Fatalf("run %d: goroutines of the driver left after Close:\n%s", i, left)
		}
		if id := adm.holder(d.LockName(name)); id != 0 {
			t.Fatalf("run %d: connection %d holds the lock after Close", i, id)
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

// waitFor polls cond every 5ms until it holds or limit passes.
func waitFor(limit time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}
