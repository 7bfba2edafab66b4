package memlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/memlock"
)

// Inspect lists every holder under a prefix, of every kind, with owner,
// token, expiry and queued waiters, and nothing released or elsewhere.
func TestInspect(t *testing.T) {
	ctx := t.Context()
	store := memlock.NewStore()
	d := store.Driver()
	l, err := memlock.New(store)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	held, err := l.Acquire(ctx, "jobs/a")
	if err != nil {
		t.Fatal(err)
	}
	gone, err := l.Acquire(ctx, "jobs/b")
	if err != nil {
		t.Fatal(err)
	}
	if err := gone.Release(ctx); err != nil {
		t.Fatal(err)
	}
	outside, err := l.Acquire(ctx, "elsewhere")
	if err != nil {
		t.Fatal(err)
	}
	r1, err := l.AcquireRead(ctx, "jobs/a")
	if err != nil {
		t.Fatal(err)
	}
	r2, err := l.AcquireRead(ctx, "jobs/a")
	if err != nil {
		t.Fatal(err)
	}

	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	waiting := make(chan error, 1)
	go func() { _, err := l.Acquire(wctx, "jobs/a"); waiting <- err }()
	var got []driver.LockInfo
	for deadline := time.Now().Add(5 * time.Second); ; {
		if got, err = d.Inspect(ctx, "jobs/"); err != nil {
			t.Fatal(err)
		}
		if len(got) > 0 && got[0].Waiters == 1 || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	want := []struct {
		mode  driver.Mode
		token uint64
		owner string
		ttl   time.Duration
	}{
		{driver.Exclusive, held.Token(), held.Owner(), held.TTL()},
		{driver.Read, r1.Token(), r1.Owner(), r1.TTL()},
		{driver.Read, r2.Token(), r2.Owner(), r2.TTL()},
	}
	if len(got) != len(want) {
		t.Fatalf("Inspect(jobs/) = %+v, want %d entries for jobs/a", got, len(want))
	}
	for i, w := range want {
		g := got[i]
		if g.Name != "jobs/a" || g.Mode != w.mode || g.Token != w.token || g.Owner != w.owner {
			t.Errorf("entry %d = %+v, want jobs/a %v token %d owner %s", i, g, w.mode, w.token, w.owner)
		}
		if left := time.Until(g.Expires); left <= 0 || left > w.ttl {
			t.Errorf("entry %d expires in %v, want within %v", i, left, w.ttl)
		}
	}
	if got[0].Waiters != 1 || got[1].Waiters != 0 {
		t.Errorf("waiters = %d (mutex), %d (rw), want 1 and 0", got[0].Waiters, got[1].Waiters)
	}

	all, err := d.Inspect(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 4 || all[0].Name != "elsewhere" || all[0].Token != outside.Token() {
		t.Errorf("Inspect(\"\") = %+v, want elsewhere then the three holders of jobs/a", all)
	}
	cancel()
	if err := <-waiting; err == nil {
		t.Error("the waiter got the lock while it was held")
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Inspect(ctx, ""); err != driver.ErrClosed {
		t.Errorf("Inspect after Close = %v, want ErrClosed", err)
	}
}
