package zklock_test

import (
	"context"
	"testing"
	"time"

	"github.com/dlockgo/dlock/internal/testenv"
)

const pkgPath = "github.com/dlockgo/dlock/zklock"

// TestCloseLeavesNoGoroutine: once Close returns, none of the driver's
// goroutines is left: the session's (its monitor, the close of its
// connection), the watch of a held node, an acquisition given up.
func TestCloseLeavesNoGoroutine(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	servers := []string{testenv.ZKAddr(t)}
	for i := range 5 {
		before := testenv.Goroutines(pkgPath)
		l, _ := newLocker(t, servers, testPrefix(), 0)
		_, err := l.Acquire(ctx, "close")
		if err != nil {
			t.Fatal(err)
		}
		// A second lock contends with the first: its acquisition watches
		// the holder's node until its context ends.
		wctx, wcancel := context.WithTimeout(ctx, 50*time.Millisecond)
		_, err = l.Acquire(wctx, "close")
		wcancel()
		if err == nil {
			t.Fatal("a second Acquire of a held lock succeeded")
		}
		if err := l.Close(); err != nil {
			t.Fatalf("run %d: Close: %v", i, err)
		}
		if left := testenv.NewGoroutines(before, pkgPath); left != "" {
			t.Fatalf("run %d: goroutines of the driver left after Close:\n%s", i, left)
		}
	}
}
