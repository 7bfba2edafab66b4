package zklock_test

import (
	"testing"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/internal/testenv"
)

// Inspect, from another driver on the same prefix, lists the held
// mutexes, readers, writers and leaders under a prefix (names nested in
// one another included) with their tokens, owners and waiters, and
// nothing released or elsewhere.
func TestInspect(t *testing.T) {
	servers := []string{testenv.ZKAddr(t)}
	prefix := testPrefix()
	ctx := t.Context()
	l, d := newLocker(t, servers, prefix, 10*time.Second)
	other := newDriver(t, servers, prefix, 10*time.Second)

	// A waiter queues behind jobs/a, a writer behind the readers.
	sc := testenv.NewInspectScene(t, ctx, l)
	a, ab, r1, r2, lead := sc.A, sc.AB, sc.R1, sc.R2, sc.Lead
	eventually(t, 5*time.Second, "two waiters queued", func() bool { return d.Waiting() == 2 })

	got, err := other.Inspect(ctx, "jobs/")
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		name    string
		mode    driver.Mode
		lease   *dlock.Lease
		waiters int
	}{
		{"jobs/a", driver.Exclusive, a, 1},
		{"jobs/a/b", driver.Exclusive, ab, 0},
		{"jobs/e", driver.Leader, lead, 0},
		{"jobs/rw", driver.Read, r1, 1},
		{"jobs/rw", driver.Read, r2, 1},
	}
	if len(got) != len(want) {
		t.Fatalf("Inspect(jobs/) = %+v, want %d entries", got, len(want))
	}
	for i, w := range want {
		g := got[i]
		if g.Name != w.name || g.Mode != w.mode || g.Token != w.lease.Token() || g.Owner != w.lease.Owner() ||
			g.Waiters != w.waiters || !g.Expires.IsZero() {
			t.Errorf("entry %d = %+v, want %s %v token %d owner %s waiters %d, no expiry",
				i, g, w.name, w.mode, w.lease.Token(), w.lease.Owner(), w.waiters)
		}
	}

	// A prefix that ends inside a segment, and one naming a nested lock;
	// the readers go: the writer holds, and nobody waits for it.
	sc.Finish(t, ctx, d, other)
}
