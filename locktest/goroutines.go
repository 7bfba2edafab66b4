package locktest

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/dlockgo/dlock"
)

// heldLocks is how many locks heldNoGoroutine holds at once.
const heldLocks = 40

// heldNoGoroutine: holding a lock costs no goroutine of its own. A
// session's or connection's goroutines serve all its locks, a loss is
// reported through Grant.OnLost, and a renewal is a timer. With one lock
// held first (so that the client's own goroutines are running), heldLocks
// more are taken with a long TTL, so that no renewal is in flight; the
// count of goroutines must then settle below one per two held locks. A
// goroutine that a grant starts for a moment (the watch a ZooKeeper holder
// sets after 25 ms) is allowed its moment: the count is read until it
// settles, for at most prompt.
func (s *suite) heldNoGoroutine(t *testing.T, ctx context.Context, name string) {
	l := s.locker(t)
	first, err := l.Acquire(ctx, name+"/first", dlock.WithTTL(holdTTL))
	if err != nil {
		t.Fatal(err)
	}
	defer release(t, ctx, first)
	before := runtime.NumGoroutine()
	leases := make([]*dlock.Lease, 0, heldLocks)
	defer func() {
		for _, lease := range leases {
			release(t, ctx, lease)
		}
	}()
	for i := range heldLocks {
		lease, err := l.Acquire(ctx, fmt.Sprintf("%s/%d", name, i), dlock.WithTTL(holdTTL))
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, lease)
	}
	grew := runtime.NumGoroutine() - before
	for deadline := time.Now().Add(prompt); grew >= heldLocks/2 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
		grew = runtime.NumGoroutine() - before
	}
	if grew >= heldLocks/2 {
		t.Errorf("%d more locks held took %d more goroutines, want fewer than one per two locks", heldLocks, grew)
	}
	t.Logf("%d more locks held: %+d goroutines", heldLocks, grew)
	for _, lease := range leases {
		if err := lease.Err(); err != nil {
			t.Errorf("%s: %v", lease.Name(), err)
		}
	}
}

// NoLeak checks that the goroutines a test started have ended: that the
// count of goroutines comes back to before (runtime.NumGoroutine, read
// before the test started any) within 5 s, a hang bound for goroutines
// that end a moment after the Close that ends them. If not, it reports
// every goroutine's stack.
func NoLeak(t testing.TB, before int) {
	t.Helper()
	deadline := time.Now().Add(prompt)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<20)
		t.Errorf("%d goroutines before, %d after:\n%s", before, n, buf[:runtime.Stack(buf, true)])
	}
}
