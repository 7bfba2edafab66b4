package zklock_test

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/locktest"
	"github.com/dlockgo/dlock/zklock"
)

// TestSemaphoreNeverOverLimit: 32 goroutines on 4 clients take permits of
// a semaphore of 3 many times; never more than 3 hold at once, the limit is
// reached, and the tokens are all distinct. On the standalone server and
// on the ensemble.
func TestSemaphoreNeverOverLimit(t *testing.T) {
	t.Run("standalone", func(t *testing.T) { testSemaphoreNeverOverLimit(t, []string{testenv.ZKAddr(t)}) })
	t.Run("ensemble", func(t *testing.T) { testSemaphoreNeverOverLimit(t, testenv.ZKEnsembleAddrs(t)) })
}

func testSemaphoreNeverOverLimit(t *testing.T, servers []string) {
	f := newFixtureOn(t, servers, 90*time.Second)
	ctx := f.ctx
	const (
		limit      = 3
		goroutines = 32
		rounds     = 4
	)
	lockers := make([]*dlock.Locker, 4)
	for i := range lockers {
		lockers[i], _ = f.locker()
	}
	var (
		holders peak
		mu      sync.Mutex
		tokens  []uint64
		wg      sync.WaitGroup
	)
	for g := range goroutines {
		wg.Go(func() {
			l := lockers[g%len(lockers)]
			for range rounds {
				lease, err := l.AcquirePermit(ctx, "sem", limit)
				if err != nil {
					t.Errorf("AcquirePermit: %v", err)
					return
				}
				holders.enter()
				mu.Lock()
				tokens = append(tokens, lease.Token())
				mu.Unlock()
				time.Sleep(20 * time.Millisecond)
				holders.leave()
				if err := lease.Release(ctx); err != nil {
					t.Errorf("Release: %v", err)
				}
			}
		})
	}
	wg.Wait()
	if m := holders.max.Load(); m > limit {
		t.Errorf("%d permits held at once, limit %d", m, limit)
	} else if m < limit {
		t.Errorf("at most %d permits held at once by %d contenders: the limit %d was never reached", m, goroutines, limit)
	}
	if len(tokens) != goroutines*rounds {
		t.Errorf("%d grants, want %d", len(tokens), goroutines*rounds)
	}
	slices.Sort(tokens)
	if len(slices.Compact(tokens)) != len(tokens) || tokens[0] == 0 {
		t.Errorf("tokens are not all distinct and non-zero")
	}
}

// TestSemaphoreTry: TryAcquirePermit fails while every permit is held,
// leaves no node behind, and succeeds once one is given back; a semaphore
// is not the mutex of the same name.
func TestSemaphoreTry(t *testing.T) {
	f := newFixture(t, 30*time.Second)
	ctx, prefix, adm := f.ctx, f.prefix, f.adm
	a, _ := f.locker()
	b, _ := f.locker()
	mutex := locktest.Must(t)(a.TryAcquire(ctx, "try"))
	p1 := locktest.Must(t)(a.TryAcquirePermit(ctx, "try", 2))
	p2 := locktest.Must(t)(b.TryAcquirePermit(ctx, "try", 2))
	if _, err := b.TryAcquirePermit(ctx, "try", 2); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("a third permit of 2 = %v, want ErrNotAcquired", err)
	}
	if n := len(adm.nodes(prefix + "/#sem/try")); n != 2 {
		t.Errorf("%d permit nodes after a failed TryAcquirePermit, want 2", n)
	}
	if err := p1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	p3, err := b.TryAcquirePermit(ctx, "try", 2)
	if err != nil {
		t.Fatalf("TryAcquirePermit after a release: %v", err)
	}
	if p3.Token() <= p2.Token() {
		t.Errorf("token %d is not above the earlier %d", p3.Token(), p2.Token())
	}
	_ = p2.Release(ctx)
	_ = p3.Release(ctx)
	_ = mutex.Release(ctx)
}

// TestSemaphoreNoHerd: with 2 permits held and 6 waiters queued, each
// release wakes two waiters: the first, which takes the permit, and the
// one behind it, which becomes first. Permits go in order of arrival.
func TestSemaphoreNoHerd(t *testing.T) {
	f := newFixture(t, 60*time.Second)
	ctx, prefix, adm := f.ctx, f.prefix, f.adm
	dir := prefix + "/#sem/herd"
	const (
		limit   = 2
		waiters = 6
	)
	h, _ := f.locker()
	var held []*dlock.Lease // the current holders, oldest first
	for range limit {
		lease := locktest.Must(t)(h.AcquirePermit(ctx, "herd", limit))
		held = append(held, lease)
	}
	drivers := make([]*zklock.Driver, waiters)
	got := make(chan int, waiters)
	leases := make([]*dlock.Lease, waiters)
	for i := range waiters {
		var l *dlock.Locker
		l, drivers[i] = f.locker()
		go func() {
			lease, err := l.AcquirePermit(ctx, "herd", limit)
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				return
			}
			leases[i] = lease
			got <- i
		}()
		adm.waitNodes(dir, limit+i+1, 5*time.Second)
	}
	waiting := func() int64 { return sum(drivers, (*zklock.Driver).Waiting) }
	wakeups := func() int64 { return sum(drivers, (*zklock.Driver).Wakeups) }
	eventually(t, 5*time.Second, "all waiters waiting", func() bool { return waiting() == waiters })
	// Only the first waiter, which watches the children, wakes as the
	// others arrive behind it: once for each at most.
	time.Sleep(200 * time.Millisecond)
	arrivals := wakeups()
	if arrivals > waiters-1 || drivers[0].Wakeups() != arrivals {
		t.Errorf("%d wake-ups before any release, %d of them the first waiter's; want at most one per later arrival (%d), all the first waiter's",
			arrivals, drivers[0].Wakeups(), waiters-1)
	}
	var order []int
	for k := range waiters {
		if err := held[0].Release(ctx); err != nil {
			t.Fatal(err)
		}
		held = held[1:]
		var i int
		select {
		case i = <-got:
		case <-time.After(10 * time.Second):
			t.Fatalf("release %d: no waiter got the permit", k)
		}
		order = append(order, i)
		held = append(held, leases[i])
		left := int64(waiters - k - 1)
		// The new holder woke, and so did the waiter behind it, if any.
		want := arrivals + int64(2*k+1)
		if left > 0 {
			want++
		}
		eventually(t, 5*time.Second, "the waiters settle", func() bool { return waiting() == left && wakeups() >= want })
		time.Sleep(50 * time.Millisecond) // any extra wake-up would show by now
		if w := wakeups(); w != want {
			t.Errorf("after release %d: %d wake-ups in all, want %d", k, w, want)
		}
		if n := holdersIn(adm, dir, limit); n != limit {
			t.Errorf("after release %d: %d holders", k, n)
		}
	}
	if want := []int{0, 1, 2, 3, 4, 5}; !slices.Equal(order, want) {
		t.Errorf("permits granted in order %v, want %v", order, want)
	}
	for _, l := range held {
		_ = l.Release(ctx)
	}
}

// holdersIn returns how many nodes of dir hold a permit of limit.
func holdersIn(adm *admin, dir string, limit int) int {
	return min(len(adm.nodes(dir)), limit)
}

// TestSemaphoreCrashedHolder: a crashed holder's permit comes back when
// the ensemble expires its session, not before; a waiter then gets it.
func TestSemaphoreCrashedHolder(t *testing.T) {
	f := newFixture(t, 30*time.Second)
	ctx, servers, prefix := f.ctx, f.servers, f.prefix
	const timeout = 2 * time.Second
	a, _ := newLocker(t, servers, prefix, timeout)
	b, db := newLocker(t, servers, prefix, timeout)
	c, _ := newLocker(t, servers, prefix, timeout)
	pa := locktest.Must(t)(a.AcquirePermit(ctx, "crash", 2))
	pb := locktest.Must(t)(b.AcquirePermit(ctx, "crash", 2))
	got := make(chan *dlock.Lease, 1)
	go func() {
		l, err := c.AcquirePermit(ctx, "crash", 2)
		if err != nil {
			t.Errorf("waiter: %v", err)
		}
		got <- l
	}()
	time.Sleep(300 * time.Millisecond) // the waiter queues
	db.Crash()
	_, _, heard := db.SessionInfo()
	pc := <-got
	if pc == nil {
		return
	}
	acquired := time.Now()
	select {
	case <-pb.Done():
	default:
		t.Error("the waiter got the permit before the crashed holder's lease was declared lost")
	}
	if d := acquired.Sub(heard); d < timeout {
		t.Errorf("the waiter got the permit %v after the ensemble last heard from the crashed holder, before the session timeout %v", d, timeout)
	}
	if pc.Token() <= pb.Token() {
		t.Errorf("token %d is not above the crashed holder's %d", pc.Token(), pb.Token())
	}
	if err := pa.Renew(ctx); err != nil {
		t.Errorf("the other holder's permit: %v", err)
	}
	_ = pa.Release(ctx)
	_ = pc.Release(ctx)
}
