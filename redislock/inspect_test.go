package redislock

import (
	"context"
	"testing"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
)

// Inspect lists held locks of every kind under a prefix — mutexes with
// owner, token, expiry and queued waiters, readers one by one, writers,
// permit holders, leaders — sorted by name, and nothing released or
// elsewhere.
func TestInspect(t *testing.T) {
	d := newDriver(t, nil)
	ctx := t.Context()
	l := newLocker(t, d)
	take := func(lease *dlock.Lease, err error) *dlock.Lease {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return lease
	}
	held := take(l.Acquire(ctx, "jobs/a"))
	other := take(l.Acquire(ctx, "jobs/b"))
	if err := other.Release(ctx); err != nil {
		t.Fatal(err)
	}
	take(l.Acquire(ctx, "elsewhere"))
	r1 := take(l.AcquireRead(ctx, "jobs/rw"))
	r2 := take(l.AcquireRead(ctx, "jobs/rw"))
	w := take(l.AcquireWrite(ctx, "jobs/w"))
	p1 := take(l.AcquirePermit(ctx, "jobs/sem", 3))
	p2 := take(l.AcquirePermit(ctx, "jobs/sem", 3))
	lead := take(l.Campaign(ctx, "jobs/el", "me"))
	gone := take(l.AcquirePermit(ctx, "jobs/sem2", 2))
	if err := gone.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// A waiter queues behind jobs/a.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	waiting := make(chan error, 1)
	go func() { _, err := l.Acquire(wctx, "jobs/a"); waiting <- err }()
	deadline := time.Now().Add(5 * time.Second)
	var got []driver.LockInfo
	var err error
	for {
		if got, err = d.Inspect(ctx, "jobs/"); err != nil {
			t.Fatal(err)
		}
		if len(got) > 0 && got[0].Waiters == 1 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	want := []struct {
		name    string
		mode    driver.Mode
		leases  []*dlock.Lease // one of them
		waiters int
	}{
		{"jobs/a", driver.Exclusive, []*dlock.Lease{held}, 1},
		{"jobs/el", driver.Leader, []*dlock.Lease{lead}, 0},
		{"jobs/rw", driver.Read, []*dlock.Lease{r1, r2}, 0},
		{"jobs/rw", driver.Read, []*dlock.Lease{r1, r2}, 0},
		{"jobs/sem", driver.Permit, []*dlock.Lease{p1, p2}, 0},
		{"jobs/sem", driver.Permit, []*dlock.Lease{p1, p2}, 0},
		{"jobs/w", driver.Write, []*dlock.Lease{w}, 0},
	}
	if len(got) != len(want) {
		t.Fatalf("Inspect(jobs/) = %+v, want %d entries", got, len(want))
	}
	seen := map[string]bool{}
	for i, wt := range want {
		g := got[i]
		match := false
		for _, ls := range wt.leases {
			match = match || g.Owner == ls.Owner() && g.Token == ls.Token()
		}
		if g.Name != wt.name || g.Mode != wt.mode || !match || g.Waiters != wt.waiters || seen[g.Owner] {
			t.Errorf("entry %d = %+v, want %s %v held by one of %d leases (owner and token), waiters %d",
				i, g, wt.name, wt.mode, len(wt.leases), wt.waiters)
		}
		seen[g.Owner] = true
		if left := time.Until(g.Expires); left <= 0 || left > held.TTL() {
			t.Errorf("entry %d expires in %v, want within the TTL %v", i, left, held.TTL())
		}
	}
	all, err := d.Inspect(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != len(want)+1 || all[0].Name != "elsewhere" || all[1].Name != "jobs/a" {
		t.Errorf("Inspect(\"\") = %+v, want elsewhere and the jobs/ entries, sorted", all)
	}
	cancel()
	<-waiting
}
