package zklock_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/locktest"
	"github.com/dlockgo/dlock/zklock"
)

// TestFIFO queues 10 waiters in a known order behind a holder; they
// acquire in that order.
func TestFIFO(t *testing.T) {
	f := newFixture(t, 60*time.Second)
	ctx, prefix, adm := f.ctx, f.prefix, f.adm
	holder, _ := f.locker()
	lease := locktest.Must(t)(holder.Acquire(ctx, "fifo"))
	const waiters = 10
	var (
		mu    sync.Mutex
		order []int
		wg    sync.WaitGroup
	)
	for i := range waiters {
		l, _ := f.locker()
		wg.Go(func() {
			lease, err := l.Acquire(ctx, "fifo")
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			if err := lease.Release(ctx); err != nil {
				t.Errorf("waiter %d: release: %v", i, err)
			}
		})
		adm.waitLocks(prefix, "fifo", i+2, 10*time.Second) // queued before the next one starts
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if want := []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}; !slices.Equal(order, want) {
		t.Errorf("waiters acquired in order %v, want %v", order, want)
	}
}

// TestNoHerd queues 20 waiters; each release wakes exactly one of them,
// which then holds the lock without reading the children again.
func TestNoHerd(t *testing.T) {
	f := newFixture(t, 60*time.Second)
	ctx, prefix, adm := f.ctx, f.prefix, f.adm
	holder, _ := f.locker()
	lease := locktest.Must(t)(holder.Acquire(ctx, "herd"))
	const waiters = 20
	drivers := make([]*zklock.Driver, waiters)
	lockers := make([]*dlock.Locker, waiters)
	for i := range waiters {
		lockers[i], drivers[i] = f.locker()
	}
	wakeups := func() int64 { return sum(drivers, (*zklock.Driver).Wakeups) }
	listings := func() int64 { return sum(drivers, (*zklock.Driver).Listings) }

	var (
		acquired atomic.Int64
		wg       sync.WaitGroup
	)
	for i := range waiters {
		wg.Go(func() {
			lease, err := lockers[i].Acquire(ctx, "herd")
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				return
			}
			// Releases so far: the holder's and those of the k-1 waiters
			// before this one. Each must have woken one waiter.
			k := acquired.Add(1)
			if w := wakeups(); w != k {
				t.Errorf("acquisition #%d: %d wake-ups so far, want %d (one per release)", k, w, k)
			}
			if err := lease.Release(ctx); err != nil {
				t.Errorf("waiter %d: release: %v", i, err)
			}
		})
	}
	adm.waitLocks(prefix, "herd", waiters+1, 10*time.Second)
	for deadline := time.Now().Add(10 * time.Second); sum(drivers, (*zklock.Driver).Waiting) < waiters; {
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d waiters are waiting", sum(drivers, (*zklock.Driver).Waiting), waiters)
		}
		time.Sleep(5 * time.Millisecond)
	}
	listed := listings()
	if listed != waiters {
		t.Errorf("%d child listings to queue %d waiters, want one each", listed, waiters)
	}
	if w := wakeups(); w != 0 {
		t.Errorf("%d wake-ups before the first release", w)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if w := wakeups(); w != waiters {
		t.Errorf("%d wake-ups for %d releases, want one each", w, waiters)
	}
	// A release tells the next waiter that its predecessor was the holder
	// (it sets the node's data as it deletes it), so the woken waiter holds
	// the lock without listing the children again.
	if l := listings() - listed; l != 0 {
		t.Errorf("waiters listed the children %d times after queueing; want none (a hand-over is one notification)", l)
	}
	t.Logf("%d waiters: %d wake-ups, %d child listings", waiters, wakeups(), listings())
}

// TestTokensIncrease takes names many times from three clients, with
// TryAcquire and Acquire, and once more after the name's znode was removed
// as empty and created again: tokens strictly increase throughout.
func TestTokensIncrease(t *testing.T) {
	f := newFixture(t, 60*time.Second)
	ctx, prefix, adm := f.ctx, f.prefix, f.adm
	var lockers []*dlock.Locker
	for range 3 {
		l, _ := f.locker()
		lockers = append(lockers, l)
	}
	var last uint64
	take := func(i int, name string) {
		t.Helper()
		lease := locktest.TakeTurn(t, ctx, lockers, i, name)
		if lease.Token() <= last {
			t.Errorf("acquisition %d of %q: token %d, not above the previous %d", i, name, lease.Token(), last)
		}
		last = lease.Token()
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 200 {
		take(i, "tokens")
	}
	// The name's container goes once it stays empty (the project's servers
	// check every second); the next acquisition recreates it.
	deadline := time.Now().Add(10 * time.Second)
	for {
		ok, _, err := adm.conn.Exists(prefix + "/tokens")
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the empty container znode of a released lock was not removed")
		}
		time.Sleep(100 * time.Millisecond)
	}
	take(0, "tokens")
	take(1, "tokens")
}

// TestNestedNames: "a" and "a/b" are different locks, though a's znode is
// b's parent.
func TestNestedNames(t *testing.T) {
	f := newFixture(t, 30*time.Second)
	ctx := f.ctx
	a, _ := f.locker()
	b, _ := f.locker()
	child := locktest.Must(t)(a.Acquire(ctx, "nest/child"))
	parent, err := a.TryAcquire(ctx, "nest")
	if err != nil {
		t.Fatalf("TryAcquire of the parent name while its child name is held: %v", err)
	}
	for _, name := range []string{"nest", "nest/child"} {
		if _, err := b.TryAcquire(ctx, name); !errors.Is(err, dlock.ErrNotAcquired) {
			t.Errorf("TryAcquire(%q) while held = %v, want ErrNotAcquired", name, err)
		}
	}
	if err := child.Release(ctx); err != nil {
		t.Fatal(err)
	}
	other, err := b.TryAcquire(ctx, "nest/child")
	if err != nil {
		t.Fatalf("TryAcquire of the released child name: %v", err)
	}
	_ = other.Release(ctx)
	_ = parent.Release(ctx)
}

// TestGivingUpLeavesNoNode: a TryAcquire that fails, and an Acquire whose
// context ends during the wait, remove their nodes before they return.
func TestGivingUpLeavesNoNode(t *testing.T) {
	f := newFixture(t, 30*time.Second)
	ctx, prefix, adm := f.ctx, f.prefix, f.adm
	a, _ := f.locker()
	b, _ := f.locker()
	lease := locktest.Must(t)(a.Acquire(ctx, "give-up"))
	check := func(what string) {
		t.Helper()
		if n := len(adm.locks(prefix, "give-up")); n != 1 {
			t.Errorf("after %s: %d lock nodes, want only the holder's", what, n)
		}
	}
	if _, err := b.TryAcquire(ctx, "give-up"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryAcquire while held = %v", err)
	}
	check("a failed TryAcquire")

	wctx, wcancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err := b.Acquire(wctx, "give-up")
	wcancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire past its deadline = %v", err)
	}
	check("an Acquire past its deadline")

	wctx, wcancel = context.WithCancel(ctx)
	time.AfterFunc(200*time.Millisecond, wcancel)
	_, err = b.Acquire(wctx, "give-up")
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Acquire = %v", err)
	}
	check("a cancelled Acquire")
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(adm.locks(prefix, "give-up")); n != 0 {
		t.Errorf("after the release: %d lock nodes, want none", n)
	}
}

// TestWaiterNodeTakenAway: when a waiter's node is deleted behind its back,
// the waiter queues again rather than taking the lock with a node that no
// longer exists (which would let the next waiter in too).
func TestWaiterNodeTakenAway(t *testing.T) {
	f := newFixture(t, 30*time.Second)
	ctx, prefix, adm := f.ctx, f.prefix, f.adm
	a, _ := f.locker()
	b, _ := f.locker()
	c, _ := f.locker()
	held := locktest.Must(t)(a.Acquire(ctx, "waiter-gone"))
	var holders peak
	var wg sync.WaitGroup
	take := func(l *dlock.Locker, who string) {
		lease, err := l.Acquire(ctx, "waiter-gone")
		if err != nil {
			t.Errorf("%s: %v", who, err)
			return
		}
		holders.enter()
		time.Sleep(300 * time.Millisecond)
		holders.leave()
		_ = lease.Release(ctx)
	}
	wg.Go(func() { take(b, "b") })
	adm.waitLocks(prefix, "waiter-gone", 2, 5*time.Second)
	gone := adm.locks(prefix, "waiter-gone")[1]
	if err := adm.conn.Delete(prefix+"/waiter-gone/"+gone, -1); err != nil {
		t.Fatal(err)
	}
	adm.waitLocks(prefix, "waiter-gone", 2, 5*time.Second) // b queued again
	wg.Go(func() { take(c, "c") })
	adm.waitLocks(prefix, "waiter-gone", 3, 5*time.Second)
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if m := holders.max.Load(); m > 1 {
		t.Errorf("%d holders at once after a waiter's node was deleted", m)
	}
}
