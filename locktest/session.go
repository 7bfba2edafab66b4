package locktest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/dlockgo/dlock"
)

// A SessionLoss is the body of a test of a backend whose held locks share
// sessions (server connections), up to PerSession locks on each: see
// Run.
type SessionLoss struct {
	// Locker takes the locks: its sessions hold PerSession locks each, and
	// learn of a session's end from the session itself (not only from a
	// keep-alive check, which the test does not wait for).
	Locker *dlock.Locker
	// Other is another client, which takes the lost locks after the loss.
	Other *dlock.Locker
	// PerSession is how many locks share one of Locker's sessions.
	PerSession int
	// Session names the server session that holds lease's lock.
	Session func(t *testing.T, lease *dlock.Lease) string
	// End ends that session on the server, as an operator would
	// (pg_terminate_backend, KILL).
	End func(t *testing.T, session string)
}

// Run takes 3*PerSession locks, ends the first one's session, and checks
// that the leases cost no goroutine each and that exactly the locks of
// that session are lost at once: each Done
// closes, Err matches ErrLost, Release matches ErrNotHeld, and Other then
// gets the lock (within 5s: a server may report a session's end before it
// lets its locks go); the locks of the other sessions stay held and
// release cleanly.
func (c SessionLoss) Run(t *testing.T, ctx context.Context, base string) {
	t.Helper()
	n := 3 * c.PerSession
	before := runtime.NumGoroutine()
	leases := make([]*dlock.Lease, n)
	sessions := make([]string, n)
	bySession := map[string][]int{}
	for i := range n {
		var err error
		if leases[i], err = c.Locker.TryAcquire(ctx, fmt.Sprintf("%s%d", base, i)); err != nil {
			t.Fatal(err)
		}
		sessions[i] = c.Session(t, leases[i])
		bySession[sessions[i]] = append(bySession[sessions[i]], i)
	}
	if len(bySession) != 3 {
		t.Fatalf("%d locks on %d sessions, want 3", n, len(bySession))
	}
	// A session's goroutines serve all its locks (Grant.OnLost): a lease
	// costs none of its own.
	if grew := runtime.NumGoroutine() - before; grew >= n {
		t.Errorf("%d leases on 3 sessions took %d more goroutines, want fewer than one per lease", n, grew)
	}
	ended := sessions[0]
	lost := bySession[ended]
	if len(lost) != c.PerSession {
		t.Fatalf("the first session holds %d locks, want %d", len(lost), c.PerSession)
	}
	c.End(t, ended)
	for _, i := range lost {
		select {
		case <-leases[i].Done():
		case <-time.After(5 * time.Second):
			t.Fatalf("lock %d: Done not closed 5s after its session was ended", i)
		}
		if err := leases[i].Err(); !errors.Is(err, dlock.ErrLost) {
			t.Errorf("lock %d: Err() = %v, want ErrLost", i, err)
		}
		if err := leases[i].Release(ctx); !errors.Is(err, dlock.ErrNotHeld) {
			t.Errorf("lock %d: Release after the loss = %v, want ErrNotHeld", i, err)
		}
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		got, err := c.Other.Acquire(actx, leases[i].Name())
		cancel()
		if err != nil {
			t.Errorf("lock %d: Acquire elsewhere after the loss: %v", i, err)
		} else {
			_ = got.Release(ctx)
		}
	}
	for i, lease := range leases {
		if sessions[i] == ended {
			continue
		}
		if err := lease.Err(); err != nil {
			t.Errorf("lock %d of another session: Err() = %v", i, err)
		}
		if err := lease.Release(ctx); err != nil {
			t.Errorf("lock %d of another session: Release = %v", i, err)
		}
	}
}
