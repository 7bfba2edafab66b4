package redislock

import (
	"context"
	"testing"
	"time"

	"github.com/dlockgo/dlock/driver"
)

// Inspect lists held mutexes under a prefix with owner, token, expiry and
// queued waiters, and nothing released or of another kind.
func TestInspect(t *testing.T) {
	d := newDriver(t, nil)
	ctx := t.Context()
	l := newLocker(t, d)
	held, err := l.Acquire(ctx, "jobs/a")
	if err != nil {
		t.Fatal(err)
	}
	other, err := l.Acquire(ctx, "jobs/b")
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Acquire(ctx, "elsewhere"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.AcquireRead(ctx, "jobs/rw"); err != nil {
		t.Fatal(err)
	}
	// A waiter queues behind jobs/a.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	waiting := make(chan error, 1)
	go func() { _, err := l.Acquire(wctx, "jobs/a"); waiting <- err }()
	deadline := time.Now().Add(5 * time.Second)
	var got []driver.LockInfo
	for {
		if got, err = d.Inspect(ctx, "jobs/"); err != nil {
			t.Fatal(err)
		}
		if len(got) == 1 && got[0].Waiters == 1 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if len(got) != 1 {
		t.Fatalf("Inspect(jobs/) = %+v, want only jobs/a", got)
	}
	g := got[0]
	if g.Name != "jobs/a" || g.Owner != held.Owner() || g.Token != held.Token() || g.Mode != driver.Exclusive {
		t.Errorf("Inspect = %+v, want jobs/a owned by %s with token %d", g, held.Owner(), held.Token())
	}
	if g.Waiters != 1 {
		t.Errorf("waiters = %d, want 1", g.Waiters)
	}
	if left := time.Until(g.Expires); left <= 0 || left > held.TTL() {
		t.Errorf("expires in %v, want within the TTL %v", left, held.TTL())
	}
	all, err := d.Inspect(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 2 || all[0].Name != "elsewhere" || all[1].Name != "jobs/a" {
		t.Errorf("Inspect(\"\") = %+v, want elsewhere and jobs/a, sorted", all)
	}
	cancel()
	<-waiting
}
