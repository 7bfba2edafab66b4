package etcdlock_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/etcdlock"
	"github.com/dlockgo/dlock/locktest"
)

// TestSemaphoreNeverOverLimit: 32 goroutines on 4 clients take permits of
// a semaphore of 3, 3 times each. The holders gauge never exceeds 3 and
// reaches it; every token is distinct; nothing is left in the queue.
func TestSemaphoreNeverOverLimit(t *testing.T) {
	eps, admin, prefix, ctx := fixture(t, 90*time.Second)
	const limit, goroutines, rounds = 3, 32, 3
	lockers := make([]*dlock.Locker, 4)
	for i := range lockers {
		lockers[i] = newLocker(t, eps, prefix)
	}
	var (
		holders, most atomic.Int32
		mu            sync.Mutex
		tokens        = map[uint64]bool{}
		wg            sync.WaitGroup
	)
	for g := range goroutines {
		wg.Go(func() {
			for range rounds {
				lease, err := lockers[g%len(lockers)].AcquirePermit(ctx, "pool", limit)
				if err != nil {
					t.Error(err)
					return
				}
				n := holders.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				mu.Lock()
				if tokens[lease.Token()] {
					t.Errorf("token %d granted twice", lease.Token())
				}
				tokens[lease.Token()] = true
				mu.Unlock()
				time.Sleep(20 * time.Millisecond) // longer than a handoff, even under -race
				holders.Add(-1)
				if err := lease.Release(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	t.Logf("%d grants, at most %d holders at once", len(tokens), most.Load())
	if m := most.Load(); m > limit {
		t.Errorf("%d holders at once, limit %d", m, limit)
	} else if m < limit {
		t.Errorf("at most %d holders at once with %d goroutines: the limit %d is never used", m, goroutines, limit)
	}
	if n := len(queue(t, admin, prefix+"/#sem/pool/#")); n != 0 {
		t.Errorf("%d keys left in the queue", n)
	}
}

// TestSemaphoreWaitersWatch: with 2 permits held by H1 and H2 (in that
// order) and waiters W1, W2, W3 queued, W1 watches the whole queue and
// W2, W3 the key just ahead of each. H2's release (not the oldest holder:
// the waiter Limit places ahead of W1 is H1, which stays) admits W1; W2
// then watches the queue; W3 is not woken. TryAcquirePermit fails while
// all permits are held and leaves no key.
func TestSemaphoreWaitersWatch(t *testing.T) {
	eps, admin, prefix, ctx := fixture(t, 60*time.Second)
	q := prefix + "/#sem/pool/#"
	lockers, counter := countedLockers(t, eps, prefix, 5)
	h1, err := lockers[0].AcquirePermit(ctx, "pool", 2)
	if err != nil {
		t.Fatal(err)
	}
	h2, err := lockers[1].AcquirePermit(ctx, "pool", 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lockers[2].TryAcquirePermit(ctx, "pool", 2); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryAcquirePermit with both permits held = %v, want ErrNotAcquired", err)
	}
	waitQueue(t, admin, q, 2)
	w1 := start(func() (*dlock.Lease, error) { return lockers[2].AcquirePermit(ctx, "pool", 2) })
	waitQueue(t, admin, q, 3)
	w2 := start(func() (*dlock.Lease, error) { return lockers[3].AcquirePermit(ctx, "pool", 2) })
	waitQueue(t, admin, q, 4)
	w3 := start(func() (*dlock.Lease, error) { return lockers[4].AcquirePermit(ctx, "pool", 2) })
	keys := waitQueue(t, admin, q, 5)
	waitWatches(t, counter, 3)
	time.Sleep(50 * time.Millisecond)
	counter.expect(t, map[string]int{q: 1, string(keys[2].Key): 1, string(keys[3].Key): 1})

	if err := h2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l1 := w1.get(t, "W1")
	w2.notYet(t, "W2")
	w3.notYet(t, "W3")
	waitWatches(t, counter, 4)
	counter.mu.Lock()
	if counter.watches[q] != 2 {
		t.Errorf("the queue was watched %d times, want twice: W1, then W2 once first", counter.watches[q])
	}
	if n := counter.wakes[string(keys[3].Key)]; n != 0 {
		t.Errorf("W3 was woken %d times, want none", n)
	}
	counter.mu.Unlock()
	if l1.Token() <= h2.Token() {
		t.Errorf("W1's token %d not above H2's %d", l1.Token(), h2.Token())
	}
	if err := h1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l2 := w2.get(t, "W2")
	w3.notYet(t, "W3")
	if err := l1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l3 := w3.get(t, "W3")
	if !(l3.Token() > l2.Token() && l2.Token() > l1.Token()) {
		t.Errorf("tokens W1 %d, W2 %d, W3 %d: want them increasing", l1.Token(), l2.Token(), l3.Token())
	}
	_ = l2.Release(ctx)
	_ = l3.Release(ctx)
	watches, wakes := counter.totals()
	t.Logf("%d watches, %d wake-ups for 3 waiters and 3 releases", watches, wakes)
	// Each admission: the release wakes the first waiter, whose put wakes
	// the next, which then watches the queue (W3 has no successor).
	if watches != 5 || wakes != 5 {
		t.Errorf("%d watches and %d wake-ups, want 5 of each", watches, wakes)
	}
}

// TestSemaphoreCrashedHolder: a holder whose process dies gives its permit
// back when its session's lease expires; the waiter gets it then: not
// before (the lease is gone on the server when it is granted), and not
// never (a hang bound of 30s, 15× the TTL).
func TestSemaphoreCrashedHolder(t *testing.T) {
	eps, admin, prefix, ctx := fixture(t, 60*time.Second)
	const ttl = 2 * time.Second
	a := newLocker(t, eps, prefix, dlock.WithTTL(ttl))
	b := newLocker(t, eps, prefix, dlock.WithTTL(ttl))
	c := newLocker(t, eps, prefix, dlock.WithTTL(ttl))
	pa := locktest.Must(t)(a.AcquirePermit(ctx, "crash", 2))
	pb := locktest.Must(t)(b.AcquirePermit(ctx, "crash", 2))
	defer pb.Release(ctx)
	w := start(func() (*dlock.Lease, error) { return c.AcquirePermit(ctx, "crash", 2) })
	w.notYet(t, "the waiter")
	dead := etcdlock.SessionLease(drv(a), ttl)
	if dead == 0 {
		t.Fatal("the holder has no session lease")
	}
	_ = drv(a).Client().Close() // a's process dies: no release, no revocation
	crashed := time.Now()
	got := w.get(t, "the waiter")
	t.Logf("the waiter got the crashed holder's permit %v after the crash", time.Since(crashed))
	if resp, err := admin.TimeToLive(ctx, dead); err != nil {
		t.Fatal(err)
	} else if resp.TTL != -1 {
		t.Errorf("the waiter got the permit while the crashed holder's lease still had %ds to live", resp.TTL)
	}
	select {
	case <-pa.Done():
	case <-time.After(time.Second):
		t.Error("the crashed holder's Done is not closed")
	}
	if got.Token() <= pb.Token() {
		t.Errorf("token %d not above the earlier holder's %d", got.Token(), pb.Token())
	}
	_ = got.Release(ctx)
}

// TestSemaphoreCancelledWaiter: a waiter that gives up leaves the queue at
// once; the waiter behind it moves up and is admitted on the next release.
func TestSemaphoreCancelledWaiter(t *testing.T) {
	eps, admin, prefix, ctx := fixture(t, 30*time.Second)
	q := prefix + "/#sem/c/#"
	l := newLocker(t, eps, prefix)
	h := locktest.Must(t)(l.AcquirePermit(ctx, "c", 1))
	mctx, mcancel := context.WithCancel(ctx)
	mid := start(func() (*dlock.Lease, error) { return l.AcquirePermit(mctx, "c", 1) })
	waitQueue(t, admin, q, 2)
	last := start(func() (*dlock.Lease, error) { return l.AcquirePermit(ctx, "c", 1) })
	waitQueue(t, admin, q, 3)
	mcancel()
	select {
	case err := <-mid.err:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled waiter: %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the cancelled waiter did not return")
	}
	if n := len(queue(t, admin, q)); n != 2 {
		t.Errorf("%d keys after the waiter gave up, want 2", n)
	}
	last.notYet(t, "the last waiter")
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	_ = last.get(t, "the last waiter").Release(ctx)
}
