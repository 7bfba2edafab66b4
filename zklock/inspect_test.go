package zklock_test

import (
	"context"
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

	take := func(lease *dlock.Lease, err error) *dlock.Lease {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return lease
	}
	a := take(l.Acquire(ctx, "jobs/a"))
	ab := take(l.Acquire(ctx, "jobs/a/b"))
	gone := take(l.Acquire(ctx, "jobs/b"))
	if err := gone.Release(ctx); err != nil {
		t.Fatal(err)
	}
	take(l.Acquire(ctx, "elsewhere"))
	r1 := take(l.AcquireRead(ctx, "jobs/rw"))
	r2 := take(l.AcquireRead(ctx, "jobs/rw"))
	lead := take(l.Campaign(ctx, "jobs/e", "me"))

	// A waiter queues behind jobs/a, a writer behind the readers.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	waiting := make(chan error, 1)
	writer := make(chan *dlock.Lease, 1)
	go func() { _, err := l.Acquire(wctx, "jobs/a"); waiting <- err }()
	go func() { w, _ := l.AcquireWrite(wctx, "jobs/rw"); writer <- w }()
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

	// A prefix that ends inside a segment, and one naming a nested lock.
	testenv.CheckInspectNames(t, ctx, d, []testenv.PrefixNames{
		{Prefix: "jobs/a", Names: []string{"jobs/a", "jobs/a/b"}},
		{Prefix: "jobs/a/", Names: []string{"jobs/a/b"}},
		{Prefix: "else", Names: []string{"elsewhere"}},
		{Prefix: "", Names: []string{"elsewhere", "jobs/a", "jobs/a/b", "jobs/e", "jobs/rw", "jobs/rw"}},
		{Prefix: "nothing"},
	})

	// The readers go: the writer holds, and nobody waits for it.
	for _, r := range []*dlock.Lease{r1, r2} {
		if err := r.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	w := <-writer
	if w == nil {
		t.Fatal("the writer did not get the lock")
	}
	got, err = other.Inspect(ctx, "jobs/rw")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Mode != driver.Write || got[0].Token != w.Token() || got[0].Owner != w.Owner() || got[0].Waiters != 0 {
		t.Errorf("Inspect(jobs/rw) = %+v, want the writer alone, token %d owner %s", got, w.Token(), w.Owner())
	}
	cancel()
	<-waiting
}
