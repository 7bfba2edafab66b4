package etcdlock_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/etcdlock"
	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/locktest"
)

// watchCounter counts, per watched key, the watches waiters started and
// the deletions they were woken by.
type watchCounter struct {
	mu       sync.Mutex
	watches  map[string]int
	wakes    map[string]int
	requeues atomic.Int32
}

func newWatchCounter() *watchCounter {
	return &watchCounter{watches: map[string]int{}, wakes: map[string]int{}}
}

// expect checks that the watched keys are those of want, each watched
// as many times as want says.
func (c *watchCounter) expect(t *testing.T, want map[string]int) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.watches) != len(want) {
		t.Errorf("watched keys %v, want %v", c.watches, want)
	}
	for k, n := range want {
		if c.watches[k] != n {
			t.Errorf("key %q watched %d times, want %d (watches %v)", k, c.watches[k], n, c.watches)
		}
	}
}

// countedLockers returns n Lockers, each on a client of its own, whose
// drivers' watches one counter counts.
func countedLockers(t *testing.T, eps []string, prefix string, n int) ([]*dlock.Locker, *watchCounter) {
	counter := newWatchCounter()
	lockers := make([]*dlock.Locker, n)
	for i := range lockers {
		lockers[i] = newLocker(t, eps, prefix)
		counter.install(drv(lockers[i]))
	}
	return lockers, counter
}

func (c *watchCounter) install(d *etcdlock.Driver) {
	etcdlock.SetHooks(d,
		func(_, key string) { c.mu.Lock(); c.watches[key]++; c.mu.Unlock() },
		func(_, key string) { c.mu.Lock(); c.wakes[key]++; c.mu.Unlock() },
		func(string) { c.requeues.Add(1) })
}

func (c *watchCounter) totals() (watches, wakes int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range c.watches {
		watches += n
	}
	for _, n := range c.wakes {
		wakes += n
	}
	return watches, wakes
}

// TestWaitersWatchOnlyTheirPredecessor queues 12 waiters in a known order
// behind a holder. They acquire in that order; each watches one key, no
// key is watched by two waiters, and each release wakes exactly one
// waiter: no herd.
func TestWaitersWatchOnlyTheirPredecessor(t *testing.T) {
	eps, admin, prefix, ctx := fixture(t, 60*time.Second)
	const waiters = 12
	lockers, counter := countedLockers(t, eps, prefix, 4)
	holder, err := lockers[0].Acquire(ctx, "herd")
	if err != nil {
		t.Fatal(err)
	}
	order := make(chan int, waiters)
	var wg sync.WaitGroup
	for i := range waiters {
		wg.Go(func() {
			lease, err := lockers[i%len(lockers)].Acquire(ctx, "herd")
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				return
			}
			order <- i
			time.Sleep(5 * time.Millisecond)
			if err := lease.Release(ctx); err != nil {
				t.Errorf("waiter %d: release: %v", i, err)
			}
		})
		waitKeys(t, admin, prefix, "herd", int64(i+2)) // queued in this order
	}
	time.Sleep(100 * time.Millisecond) // let every waiter settle on its watch
	if w, k := counter.totals(); w != waiters || k != 0 {
		t.Errorf("before any release: %d watches, %d wake-ups; want %d and 0", w, k, waiters)
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(order)
	next := 0
	for i := range order {
		if i != next {
			t.Errorf("waiter %d acquired in turn %d: not in queue order", i, next)
		}
		next++
	}
	watches, wakes := counter.totals()
	t.Logf("%d waiters: %d watches, %d wake-ups, %d re-queues", waiters, watches, wakes, counter.requeues.Load())
	if watches != waiters || wakes != waiters {
		t.Errorf("%d watches and %d wake-ups for %d waiters and %d releases, want one each", watches, wakes, waiters, waiters)
	}
	counter.mu.Lock()
	defer counter.mu.Unlock()
	for key, n := range counter.watches {
		if n != 1 {
			t.Errorf("key %q was watched %d times, want once: only its successor watches it", key, n)
		}
	}
}

// TestCancelledWaiterLeavesTheQueue: a waiter in the middle of the queue
// gives up; its key goes at once, its successor moves on to the key before
// it, and the order of the others holds.
func TestCancelledWaiterLeavesTheQueue(t *testing.T) {
	eps, admin, prefix, ctx := fixture(t, 30*time.Second)
	counter := newWatchCounter()
	l := newLocker(t, eps, prefix)
	counter.install(drv(l))
	holder := locktest.Must(t)(l.Acquire(ctx, "q"))
	got := make(chan string, 2)
	acquireAs := func(who string, wctx context.Context) {
		lease, err := l.Acquire(wctx, "q")
		if err != nil {
			got <- who + ": " + err.Error()
			return
		}
		got <- who
		_ = lease.Release(ctx)
	}
	go acquireAs("first", ctx)
	waitKeys(t, admin, prefix, "q", 2)
	mctx, mcancel := context.WithCancel(ctx)
	middleDone := make(chan error, 1)
	go func() {
		lease, err := l.Acquire(mctx, "q")
		if err == nil {
			_ = lease.Release(ctx)
		}
		middleDone <- err
	}()
	waitKeys(t, admin, prefix, "q", 3)
	go acquireAs("last", ctx)
	waitKeys(t, admin, prefix, "q", 4)
	// Cancel only once every waiter's watch is in place: a predecessor
	// deleted before its successor's watch exists is found by a read, not
	// a wake-up, and the count below would be off by one.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if watches, _ := counter.totals(); watches >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the three waiters' watches were not all created")
		}
	}

	mcancel()
	if err := <-middleDone; !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled waiter: %v, want context.Canceled", err)
	}
	if n := countKeys(t, admin, prefix, "q"); n != 3 {
		t.Errorf("%d keys after the middle waiter gave up, want 3: its key must go before Acquire returns", n)
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if first, last := <-got, <-got; first != "first" || last != "last" {
		t.Errorf("acquired in order %q, %q; want first, last", first, last)
	}
	if _, wakes := counter.totals(); wakes != 3 {
		t.Errorf("%d wake-ups, want 3: the holder's and the first's releases, and the cancelled waiter's key", wakes)
	}
}

// raceEnabled is set when the race detector slows everything down.
var raceEnabled bool

// TestManyWaiters: 1000 waiters (250 under -race), over 4 drivers, queue on one name behind
// a holder, then take it in turn, each once. Queueing up and the handoffs
// must each take time proportional to the number of waiters, with one
// holder at a time, in the order the waiters queued (their tokens, the
// keys' create revisions, increase in the order of grants). When every
// waiter's acquiring transaction read the whole queue in etcd's apply
// loop (a comparison over the name's range, then a sorted read), 1000
// waiters took seconds to queue, their transactions ran past the request
// timeout and were tried again with new keys, and etcd refused requests
// ("too many requests") with almost no handoff done.
func TestManyWaiters(t *testing.T) {
	eps := testenv.EtcdEndpoints(t)
	admin := testenv.EtcdClient(t, eps)
	prefix := randomPrefix()
	// A hang bound, over 10× the time per waiter measured (1.7-17ms, the
	// latter with the machine loaded); the stall described above never
	// ends. The race detector slows the client so much that 1000 waiters'
	// own requests run past the request timeout there, so it gets fewer.
	waiters, drivers, perWaiter := 1000, 4, 200*time.Millisecond
	if raceEnabled {
		waiters = 250
	}
	ctx := locktest.Context(t, 2*time.Duration(waiters)*perWaiter+30*time.Second)
	lockers := make([]*dlock.Locker, drivers)
	for i := range lockers {
		lockers[i] = newLocker(t, eps, prefix)
	}
	holder, err := lockers[0].Acquire(ctx, "many")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	turns := locktest.StartTurns(t, ctx, lockers, "many", waiters)
	// A count, serializable: no round of Raft for the test's own reads.
	for n := int64(0); n < int64(waiters)+1; time.Sleep(20 * time.Millisecond) {
		if time.Since(start) > time.Duration(waiters)*perWaiter {
			t.Fatalf("%d of %d waiters queued in %v", n-1, waiters, time.Since(start))
		}
		resp, err := admin.Get(ctx, prefix+"/many/#", clientv3.WithPrefix(), clientv3.WithCountOnly(), clientv3.WithSerializable())
		if err != nil {
			t.Fatal(err)
		}
		n = resp.Count
	}
	queued := time.Since(start)
	start = time.Now()
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-turns.Done():
	case <-time.After(time.Duration(waiters) * perWaiter):
		t.Fatalf("%d of %d waiters got the lock in %v", turns.Granted(), waiters, time.Since(start))
	}
	handoffs := time.Since(start)
	t.Logf("%d waiters on %d drivers: queued in %v, all granted in %v (%v per handoff)",
		waiters, drivers, queued, handoffs, handoffs/time.Duration(waiters))
	// Tokens, the keys' create revisions, increase in queue order.
	turns.Check(holder.Token())
}
