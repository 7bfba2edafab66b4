package redlock

import (
	"context"
	"testing"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/locktest"
)

// Many waiters on one name over a few Lockers all get the lock in turn,
// one at a time, within a bound, and a handoff does not cost an attempt
// per waiter: of one Driver's waiters only the first retries on the
// nodes. Without that queue every release set off an attempt on all 5
// nodes from every waiter, and with a few hundred waiters the nodes'
// answers came too late for a quorum.
func TestManyWaitersTakeTurns(t *testing.T) {
	const (
		lockers = 4
		waiters = 120
	)
	c := newCluster(t, 5)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	counter := &attemptCounter{}
	ls := make([]*dlock.Locker, lockers)
	for i := range ls {
		l, err := New(counter.clients(t, c), testOptions(nil), dlock.WithTTL(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		prepare(t, l.Driver().(*Driver))
		ls[i] = l
	}
	name := uniqueName("waiters")
	// Hold the lock while the waiters queue up, so that they all wait.
	first, err := ls[0].Acquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	turns := locktest.StartTurns(t, ctx, ls, name, waiters)
	time.Sleep(500 * time.Millisecond)
	queued := counter.n.Load()
	start := time.Now()
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	<-turns.Done()
	took := time.Since(start)
	turns.Check(first.Token())
	// Per handoff: an attempt from each Driver's first waiter (one per
	// Locker), a few more after split votes, on 5 nodes each. A herd
	// would be about 5 per waiter still waiting: hundreds on average.
	per := float64(counter.n.Load()-queued) / waiters
	t.Logf("%d waiters over %d Lockers: %v for all handoffs, %.1f phase-1 requests per handoff (%d while queueing)",
		waiters, lockers, took, per, queued)
	if limit := float64(5 * 4 * lockers); per > limit {
		t.Errorf("%.1f phase-1 requests per handoff, want at most %.0f: waiters retry in a herd", per, limit)
	}
}

// A waiting Acquire rides out nodes that answer late: with 3 of 5 nodes
// paused (CLIENT PAUSE) past the holder's expiry, every attempt meanwhile
// lacks a quorum, and the wait goes on until the nodes answer again and
// the lock is free. An attempt without a quorum takes up to 11 node
// timeouts (its undo waits for the silent nodes), so the pause is long
// enough for several in a row.
func TestWaitSurvivesLateNodes(t *testing.T) {
	c := newCluster(t, 5)
	ctx := t.Context()
	holder := c.driver(t, nil)
	l := c.locker(t, nil)
	name := uniqueName("late")
	// A holder that never renews nor releases: the lock frees at its TTL.
	if _, err := holder.TryLock(ctx, driver.Request{Name: name, Owner: newOwner(), TTL: 300 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	const pause = 4 * time.Second
	got := make(chan error, 1)
	start := time.Now()
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		lease, err := l.Acquire(wctx, name)
		if err == nil {
			err = lease.Release(ctx)
		}
		got <- err
	}()
	time.Sleep(100 * time.Millisecond)
	for _, i := range []int{0, 2, 4} {
		if err := c.admin[i].Do(ctx, "client", "pause", pause.Milliseconds(), "all").Err(); err != nil {
			t.Fatalf("CLIENT PAUSE on node %d: %v", i, err)
		}
	}
	if err := <-got; err != nil {
		t.Fatalf("Acquire with 3 of 5 nodes paused for %v: %v; want the lock once they answer again", pause, err)
	}
	took := time.Since(start)
	t.Logf("acquired %v after the wait began, with 3 nodes paused for %v from 100ms", took, pause)
	if took < pause {
		t.Errorf("Acquire returned after %v, before the paused nodes answered again (%v)", took, pause)
	}
}
