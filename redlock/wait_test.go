package redlock

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/locktest"
)

// attemptCounter is a go-redis hook that counts phase-1 script calls.
type attemptCounter struct{ n atomic.Int64 }

func (h *attemptCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *attemptCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.see(cmd)
		return next(ctx, cmd)
	}
}

func (h *attemptCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			h.see(cmd)
		}
		return next(ctx, cmds)
	}
}

// clients returns c.clients(t), counted by h.
func (h *attemptCounter) clients(t testing.TB, c *cluster) []redis.UniversalClient {
	cs := c.clients(t)
	for _, rc := range cs {
		rc.(*redis.Client).AddHook(h)
	}
	return cs
}

func (h *attemptCounter) see(cmd redis.Cmder) {
	if a := cmd.Args(); len(a) > 1 && (a[1] == acquireScript.Hash() || a[1] == acquireLua) {
		h.n.Add(1)
	}
}

// A waiter does not poll: while the lock is held (and renewed) it makes a
// handful of attempts at most, and the release wakes it. The holder's TTL
// is a minute, so the waiter's only other wake-up, the holder's remaining
// TTL, is far off: a grant within 5 s of the release came by its message.
func TestWaitIsNotified(t *testing.T) {
	c := newCluster(t, 5)
	ctx := t.Context()
	holder := c.locker(t, nil, dlock.WithTTL(time.Minute))
	counter := &attemptCounter{}
	waiter, err := New(counter.clients(t, c), testOptions(nil), dlock.WithTTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer waiter.Close()
	name := uniqueName("notify")

	lease, err := holder.Acquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan time.Time, 1)
	go func() {
		l, err := waiter.Acquire(ctx, name)
		if err != nil {
			t.Error(err)
			close(got)
			return
		}
		got <- time.Now()
		_ = l.Release(ctx)
	}()
	time.Sleep(500 * time.Millisecond)
	if err := lease.Renew(ctx); err != nil { // a renewal, while the waiter waits
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	// Node requests per attempt: 5. First try, the try after subscribing.
	if n := counter.n.Load(); n > 2*5 {
		t.Errorf("%d phase-1 requests while the lock was held for 1s; want at most 10 (2 attempts): polling?", n)
	}
	released := time.Now()
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	at, ok := <-got
	if !ok {
		return
	}
	if wait := at.Sub(released); wait > 5*time.Second {
		t.Errorf("the waiter acquired %v after the release, the holder's TTL a minute; want it woken by the release message", wait)
	}
	t.Logf("acquired %v after the release; %d phase-1 requests in all", at.Sub(released), counter.n.Load())
}

// Close ends a wait with ErrClosed.
func TestCloseEndsWait(t *testing.T) {
	c := newCluster(t, 3)
	ctx := t.Context()
	holder := c.locker(t, nil)
	d := c.driver(t, nil)
	waiter, err := dlock.New(d)
	if err != nil {
		t.Fatal(err)
	}
	name := uniqueName("close")
	if _, err := holder.Acquire(ctx, name); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		_, err := waiter.Acquire(ctx, name)
		errc <- err
	}()
	time.Sleep(100 * time.Millisecond)
	if err := waiter.Close(); err != nil {
		t.Error(err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, dlock.ErrClosed) {
			t.Errorf("Acquire when the driver closed = %v, want ErrClosed", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Acquire did not return after Close")
	}
}

// Contenders on one name with 2 of 5 nodes down: split votes are more
// likely (a contender needs 3 of the 3 live nodes), and must resolve.
func TestContentionMinorityDown(t *testing.T) {
	c := newCluster(t, 5)
	c.kill(0, 4)
	ctx := t.Context()
	name := uniqueName("contention")
	var holders, most atomic.Int32
	done := make(chan error, 8)
	for range 8 {
		l := c.locker(t, nil)
		go func() {
			for range 10 {
				lease, err := l.Acquire(ctx, name)
				if err != nil {
					done <- err
					return
				}
				n := holders.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				holders.Add(-1)
				if err := lease.Release(ctx); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
	}
	deadline := time.After(60 * time.Second)
	for range 8 {
		select {
		case err := <-done:
			if err != nil {
				t.Error(err)
			}
		case <-deadline:
			t.Fatal("contenders did not finish")
		}
	}
	if m := most.Load(); m > 1 {
		t.Errorf("%d holders at once", m)
	}
}

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
