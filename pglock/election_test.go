package pglock_test

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/locktest"
	"github.com/dlockgo/dlock/pglock"
)

// next receives the next leader from ch, or fails t after limit.
var next = locktest.NextLeader

// closes fails t unless ch closes within 5s after at most pending values,
// once what (which should close it) has happened.
func closes(t *testing.T, ch <-chan dlock.LeaderInfo, pending int, what string) {
	t.Helper()
	limit := time.After(5 * time.Second)
	for n := 0; ; n++ {
		select {
		case info, ok := <-ch:
			if !ok {
				return
			}
			if n == pending {
				t.Errorf("%+v observed after %s", info, what)
				return
			}
		case <-limit:
			t.Errorf("%s did not close the channel", what)
			return
		}
	}
}

// TestElection: Leader and Observe follow a campaign, a resignation that
// hands over to a waiting candidate, a crash with nobody waiting, and a
// new leader.
func TestElection(t *testing.T) {
	ctx := testContext(t, 60*time.Second)
	obs := newLocker(t, pglock.Options{})
	a := newLocker(t, pglock.Options{})
	b := newLocker(t, pglock.Options{Keepalive: 200 * time.Millisecond})
	name := "elect/" + randomHex(4)

	if info, err := obs.Leader(ctx, name); err != nil || info != (dlock.LeaderInfo{}) {
		t.Fatalf("Leader before any campaign = %+v, %v; want none", info, err)
	}
	octx, ocancel := context.WithCancel(ctx)
	ch, err := obs.Observe(octx, name)
	if err != nil {
		t.Fatal(err)
	}
	if info := next(t, ch, 5*time.Second); info != (dlock.LeaderInfo{}) {
		t.Fatalf("first observed = %+v, want no leader", info)
	}

	la := mustLease(t)(a.Campaign(ctx, name, "node-a"))
	if info := next(t, ch, 5*time.Second); info.Value != "node-a" || info.Token != la.Token() {
		t.Fatalf("observed %+v, want node-a with token %d", info, la.Token())
	}
	if info, err := b.Leader(ctx, name); err != nil || info.Value != "node-a" || info.Token != la.Token() {
		t.Fatalf("Leader = %+v, %v; want node-a", info, err)
	}

	// b waits; a resigns; b leads.
	lbc := make(chan *dlock.Lease, 1)
	goTake(t, lbc, func() (*dlock.Lease, error) { return b.Campaign(ctx, name, "node-b") })
	adm := newAdmin(t)
	key := pglock.ModeKey(table, 4, name, 0)
	if !waitUntil(5*time.Second, func() bool { _, n := adm.keyRows(t, key); return n >= 1 }) {
		t.Fatal("the second candidate is not queued")
	}
	quiet(t, lbc, 50*time.Millisecond, "two leaders")
	release(t, ctx, la)
	lb := <-lbc
	// The observer sees node-b, maybe after the empty interval.
	info := next(t, ch, 5*time.Second)
	if info.Token == 0 {
		info = next(t, ch, 5*time.Second)
	}
	if info.Value != "node-b" || info.Token != lb.Token() || lb.Token() <= la.Token() {
		t.Fatalf("observed %+v after the resignation, want node-b with token %d > %d", info, lb.Token(), la.Token())
	}

	// b crashes with nobody waiting: only the observer's wait on the
	// server can tell.
	start := time.Now()
	pglock.Crash(b.Driver().(*pglock.Driver))
	if info := next(t, ch, 10*time.Second); info != (dlock.LeaderInfo{}) {
		t.Fatalf("observed %+v after the leader crashed, want no leader", info)
	}
	t.Logf("the crash was observed after %v", time.Since(start))
	if info, err := a.Leader(ctx, name); err != nil || info != (dlock.LeaderInfo{}) {
		t.Fatalf("Leader after the crash = %+v, %v; want none", info, err)
	}

	lc := mustLease(t)(a.Campaign(ctx, name, "node-c"))
	if info := next(t, ch, 5*time.Second); info.Value != "node-c" || info.Token <= lb.Token() {
		t.Fatalf("observed %+v, want node-c with a token above %d", info, lb.Token())
	}
	ocancel()
	closes(t, ch, 1, "the end of ctx") // a value may have been pending
	release(t, ctx, lc)
}

// TestObserveClosedByClose: closing the driver closes the channels.
func TestObserveClosedByClose(t *testing.T) {
	ctx := testContext(t, 20*time.Second)
	l := newLocker(t, pglock.Options{})
	a := newLocker(t, pglock.Options{})
	name := "elect/close/" + randomHex(4)
	lead := mustLease(t)(a.Campaign(ctx, name, "x"))
	ch, err := l.Observe(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if info := next(t, ch, 5*time.Second); info.Value != "x" {
		t.Fatalf("observed %+v", info)
	}
	time.Sleep(50 * time.Millisecond) // let the death watch start
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	closes(t, ch, 0, "Close")
	release(t, ctx, lead)
}

// TestObserveSlowReader: a reader that falls behind gets the latest
// leader, never the same one twice in a row.
func TestObserveSlowReader(t *testing.T) {
	ctx := testContext(t, 30*time.Second)
	l := newLocker(t, pglock.Options{})
	name := "elect/slow/" + randomHex(4)
	ch, err := l.Observe(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	var last dlock.LeaderInfo
	var lease *dlock.Lease
	for i := range 5 {
		if lease != nil {
			release(t, ctx, lease)
		}
		v := "v" + string(rune('0'+i))
		lease = mustLease(t)(l.Campaign(ctx, name, v))
		last = dlock.LeaderInfo{Value: v, Token: lease.Token()}
	}
	defer release(t, ctx, lease)
	var prev *dlock.LeaderInfo
	deadline := time.After(5 * time.Second)
	for {
		select {
		case info := <-ch:
			if prev != nil && info == *prev {
				t.Fatalf("%+v twice in a row", info)
			}
			prev = &info
			if info == last {
				return
			}
		case <-deadline:
			t.Fatalf("the latest leader %+v was not delivered; last got %+v", last, prev)
		}
	}
}

// TestKindsLeaveNoGoroutine: observers (with their wait on the server),
// semaphore waiters and the listening connection end with the driver.
func TestKindsLeaveNoGoroutine(t *testing.T) {
	ctx := testContext(t, 30*time.Second)
	holder := newLocker(t, pglock.Options{})
	name := "leak/" + randomHex(4)
	lead := mustLease(t)(holder.Campaign(ctx, name, "x"))
	full := mustLease(t)(holder.AcquirePermit(ctx, name, 1))
	before := runtime.NumGoroutine()

	d := newDriver(t, pglock.Options{})
	l, err := dlock.New(d)
	if err != nil {
		t.Fatal(err)
	}
	ch, err := l.Observe(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if info := next(t, ch, 5*time.Second); info.Value != "x" {
		t.Fatalf("observed %+v", info)
	}
	wctx, wcancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() {
		_, err := l.AcquirePermit(wctx, name, 1)
		errc <- err
	}()
	time.Sleep(100 * time.Millisecond)
	wcancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled permit wait = %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	locktest.NoLeak(t, before)
	release(t, ctx, lead, full)
}
