package redlock

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/locktest"
)

// With 2 of 5 nodes down, the lock still works: it is taken on the 3 live
// nodes, excludes under contention, and is released from all of them.
func TestMinorityDown(t *testing.T) {
	c := newCluster(t, 5)
	c.kill(1, 3)
	ctx := t.Context()
	a, b := c.locker(t, nil), c.locker(t, nil)
	name := uniqueName("minority")

	lease, err := a.TryAcquire(ctx, name)
	if err != nil {
		t.Fatalf("TryAcquire with 2 of 5 nodes down: %v", err)
	}
	if got := c.owners(name); countOf(got, lease.Owner()) != 3 {
		t.Errorf("lock on the nodes = %q, want the owner on the 3 live ones", got)
	}
	if _, err := b.TryAcquire(ctx, name); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("second TryAcquire = %v, want ErrNotAcquired", err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if got := c.ownersAfter(name, a.Driver().(*Driver)); countOf(got, "") != 3 {
		t.Errorf("lock on the nodes after release = %q, want it gone from the live ones", got)
	}

	// Exclusion under contention, over two clients.
	var holders, most, sections atomic.Int32
	var wg sync.WaitGroup
	for g := range 6 {
		l := []*dlock.Locker{a, b}[g%2]
		wg.Go(func() {
			for range 10 {
				lease, err := l.Acquire(ctx, name)
				if err != nil {
					t.Errorf("Acquire under contention: %v", err)
					return
				}
				n := holders.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				sections.Add(1)
				runtime.Gosched()
				holders.Add(-1)
				if err := lease.Release(ctx); err != nil {
					t.Errorf("Release under contention: %v", err)
				}
			}
		})
	}
	wg.Wait()
	if m := most.Load(); m > 1 {
		t.Errorf("%d holders at once", m)
	}
	if n := sections.Load(); n != 60 {
		t.Errorf("%d critical sections, want 60", n)
	}
	if got := c.ownersAfter(name, a.Driver().(*Driver), b.Driver().(*Driver)); countOf(got, "") != 3 {
		t.Errorf("lock on the nodes after contention = %q, want it gone", got)
	}
}

// With 3 of 5 nodes down no lock can be taken: the error says there is no
// quorum (not that the lock is held), and nothing is left on the 2 live
// nodes.
func TestMajorityDown(t *testing.T) {
	c := newCluster(t, 5)
	c.kill(0, 2, 4)
	ctx := t.Context()
	l := c.locker(t, nil)
	name := uniqueName("majority")

	_, err := l.TryAcquire(ctx, name)
	if !errors.Is(err, dlock.ErrNoQuorum) {
		t.Fatalf("TryAcquire with 3 of 5 nodes down = %v, want an error matching ErrNoQuorum", err)
	}
	if errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("TryAcquire with 3 of 5 nodes down = %v, should not match ErrNotAcquired", err)
	}
	t.Logf("TryAcquire: %v", err)

	// A waiting Acquire keeps trying (the nodes may come back) until its
	// context ends, and then says why it got nothing.
	start := time.Now()
	wctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	_, err = l.Acquire(wctx, name)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, dlock.ErrNoQuorum) {
		t.Fatalf("Acquire with 3 of 5 nodes down = %v, want an error matching DeadlineExceeded and ErrNoQuorum", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Acquire took %v to give up after its 500ms deadline; want it prompt (within 10 times it)", took)
	}
	if got := c.owners(name); got[1] != "" || got[3] != "" {
		t.Errorf("lock on the nodes = %q, want nothing on the live nodes 1 and 3", got)
	}

	if err := l.Driver().(*Driver).Prepare(ctx); !errors.Is(err, dlock.ErrNoQuorum) {
		t.Errorf("Prepare with 3 of 5 nodes down = %v, want ErrNoQuorum", err)
	}

	// A lock held on 2 live nodes by someone else: still no quorum, and
	// still not "held".
	c.set(t, name, newOwner(), time.Minute, 1, 3)
	if _, err := l.TryAcquire(ctx, name); !errors.Is(err, dlock.ErrNoQuorum) {
		t.Errorf("TryAcquire = %v, want ErrNoQuorum", err)
	}
}

// A minority of the nodes acquired is no lock: another owner holds the
// key on 3 nodes, we get the other 2 and must give them back.
func TestMinorityAcquired(t *testing.T) {
	c := newCluster(t, 5)
	ctx := t.Context()
	d := c.driver(t, nil)
	name := uniqueName("split")
	other := newOwner()
	c.set(t, name, other, 10*time.Second, 0, 1, 2)

	r := driver.Request{Name: name, Owner: newOwner(), TTL: 10 * time.Second}
	_, err := tryLock(t, d, r)
	var held *driver.HeldError
	if !errors.As(err, &held) {
		t.Fatalf("TryLock = %v, want a *driver.HeldError", err)
	}
	if held.Remaining <= 0 || held.Remaining > 10*time.Second {
		t.Errorf("HeldError.Remaining = %v, want in (0, 10s]", held.Remaining)
	}
	got := c.owners(name)
	if countOf(got, other) != 3 || countOf(got, "") != 2 {
		t.Errorf("lock on the nodes = %q, want the other owner's on 3 and ours removed from 2", got)
	}

	// Held on 2 only: we get 3, a quorum.
	c.takeAway(t, name)
	c.set(t, name, other, 10*time.Second, 3, 4)
	g, err := tryLock(t, d, r)
	if err != nil {
		t.Fatalf("TryLock with 3 nodes free: %v", err)
	}
	if g.Token == 0 {
		t.Error("token 0 with fencing on")
	}
	if err := d.Unlock(ctx, r); err != nil {
		t.Errorf("Unlock: %v", err)
	}
	if got := c.ownersAfter(name, d); countOf(got, r.Owner) != 0 {
		t.Errorf("lock on the nodes after unlock = %q, want ours gone", got)
	}
	if err := d.Unlock(ctx, r); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("second Unlock = %v, want ErrNotHeld", err)
	}
}

// Renew needs a quorum: with the lock gone from 3 nodes it is not held
// any more; with 3 nodes unreachable the failure is transient.
func TestRenewQuorum(t *testing.T) {
	c := newCluster(t, 5)
	ctx := t.Context()
	d, clock := c.clockedDriver(t, nil)
	name := uniqueName("renew")
	r := driver.Request{Name: name, Owner: newOwner(), TTL: 10 * time.Second}
	_, err := tryLock(t, d, r)
	if err != nil {
		t.Fatalf("TryLock: %v", err)
	}
	var exp time.Time
	for range 3 { // again if too few nodes answered in time (loaded machine)
		clock.reset(renewScript)
		if exp, err = d.Renew(ctx, r); !errors.Is(err, dlock.ErrNoQuorum) {
			break
		}
	}
	if err != nil {
		t.Fatalf("Renew: %v", err)
	}
	if limit := clock.earliest().Add(r.TTL - d.allowance(r.TTL)); exp.After(limit) {
		t.Errorf("Renew expiry %v after first send+TTL-drift %v", exp, limit)
	}

	key := DefaultPrefix + "{" + name + "}"
	for _, i := range []int{0, 1} {
		c.admin[i].Del(ctx, key)
	}
	if _, err := d.Renew(ctx, r); err != nil {
		t.Errorf("Renew with the lock on 3 of 5 nodes: %v", err)
	}
	c.kill(2, 3)
	if _, err := d.Renew(ctx, r); !errors.Is(err, dlock.ErrNoQuorum) || errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Renew with the lock on 1 live node and 2 down = %v, want ErrNoQuorum (transient)", err)
	}
	c.start(2, 3) // empty: the lock is gone there
	if _, err := d.Renew(ctx, r); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Renew with the lock on 1 of 5 nodes = %v, want ErrNotHeld", err)
	}
}

// The holder's renewal loses its quorum when 3 nodes die: the lease is
// reported lost before its TTL runs out, counted from the last renewal
// that succeeded, which was sent before the nodes died: its last expiry is
// before the kill + TTL, and Err, which decides at the call, says lost by
// then however late anything runs; Done closes (a 5 s hang bound).
func TestRenewalLosesQuorum(t *testing.T) {
	c := newCluster(t, 5)
	ctx := t.Context()
	const ttl = 300 * time.Millisecond
	l := c.locker(t, nil, dlock.WithTTL(ttl))
	lease, err := l.Acquire(ctx, uniqueName("renewal"))
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	time.Sleep(ttl / 2) // at least one renewal
	if err := lease.Err(); err != nil {
		t.Fatalf("lease ended while renewed: %v", err)
	}
	c.kill(0, 1, 2)
	killed := time.Now() // no renewal can succeed after this
	time.Sleep(time.Until(killed.Add(ttl)))
	if err := lease.Err(); !errors.Is(err, dlock.ErrLost) {
		t.Errorf("Err a TTL after 3 of 5 nodes died = %v, want ErrLost", err)
	}
	select {
	case <-lease.Done():
		t.Logf("lost after 3 of 5 nodes died: %v", lease.Err())
		if exp, limit := lease.Expires(), killed.Add(ttl); exp.After(limit) {
			t.Errorf("the lease's last expiry %v is after the kill + TTL %v", exp, limit)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Done not closed after 3 of 5 nodes died")
	}
	if !errors.Is(lease.Err(), dlock.ErrLost) {
		t.Errorf("Err = %v, want ErrLost", lease.Err())
	}
}

// The validity of a grant is measured from before the request was sent,
// less the drift allowance.
func TestValidity(t *testing.T) {
	c := newCluster(t, 5)
	ctx := t.Context()
	d, clock := c.clockedDriver(t, &Options{Drift: 3 * time.Millisecond})
	for _, ttl := range []time.Duration{100 * time.Millisecond, 300 * time.Millisecond, 30 * time.Second} {
		r := driver.Request{Name: uniqueName("validity"), Owner: newOwner(), TTL: ttl}
		var g driver.Grant
		var err error
		for range 3 { // again if too few nodes answered in time (loaded machine)
			clock.reset(acquireScript)
			if g, err = d.TryLock(ctx, r); !errors.Is(err, dlock.ErrNoQuorum) {
				break
			}
		}
		if err != nil {
			t.Fatalf("TryLock(ttl %v): %v", ttl, err)
		}
		drift := ttl/100 + 3*time.Millisecond
		// No node can have set the key before the first request left.
		if limit := clock.earliest().Add(ttl - drift); g.Expires.After(limit) {
			t.Errorf("ttl %v: Expires %v is after first send+TTL-drift %v", ttl, g.Expires, limit)
		}
		if !g.Expires.After(time.Now()) {
			t.Errorf("ttl %v: Expires %v already passed", ttl, g.Expires)
		}
		if err := d.Unlock(ctx, r); err != nil {
			t.Errorf("Unlock: %v", err)
		}
	}
}

// A wait that ends (cancelled or acquired) and Close leave no goroutine
// behind.
func TestNoGoroutineLeak(t *testing.T) {
	c := newCluster(t, 5)
	before := runtime.NumGoroutine()
	func() {
		ctx := context.Background()
		clients := c.clients(t)
		defer func() {
			for _, rc := range clients {
				_ = rc.Close()
			}
		}()
		d, err := NewDriver(clients, testOptions(nil))
		if err != nil {
			t.Fatal(err)
		}
		l, err := dlock.New(d, dlock.WithTTL(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		name := uniqueName("leak")
		lease, err := l.Acquire(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		if _, err := l.Acquire(wctx, name); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Acquire while held = %v, want DeadlineExceeded", err)
		}
		cancel()
		got := make(chan error, 1)
		go func() {
			lease2, err := l.Acquire(ctx, name)
			if err == nil {
				err = lease2.Release(ctx)
			}
			got <- err
		}()
		time.Sleep(20 * time.Millisecond)
		if err := lease.Release(ctx); err != nil {
			t.Error(err)
		}
		if err := <-got; err != nil {
			t.Error(err)
		}
		if err := l.Close(); err != nil {
			t.Error(err)
		}
	}()
	locktest.NoLeak(t, before)
}

// A caller that cancels its context as soon as each call returns (as an
// HTTP handler's request context ends) still has every node asked: the
// nodes that had not answered when a quorum did get the acquire and the
// release all the same, in that order, so once they have answered no node
// keeps a key the owner released, and the next acquisition finds every
// node free.
func TestCancelAfterReturn(t *testing.T) {
	c := newCluster(t, 5)
	l := c.locker(t, nil)
	d := l.Driver().(*Driver)
	name := uniqueName("cancel-after")
	for i := range 200 {
		ctx, cancel := context.WithCancel(context.Background())
		lease, err := l.Acquire(ctx, name)
		cancel()
		if err != nil {
			t.Fatalf("Acquire %d: %v", i, err)
		}
		ctx, cancel = context.WithCancel(context.Background())
		err = lease.Release(ctx)
		cancel()
		if err != nil {
			t.Fatalf("Release %d: %v", i, err)
		}
		if got := c.ownersAfter(name, d); countOf(got, "") != 5 {
			t.Fatalf("after release %d, once every node answered, the nodes hold %q; want the key gone from all 5", i, got)
		}
	}
}

// An Unlock whose context is already cancelled still sends the delete to
// every node: it returns the context's error at once, and the key goes.
func TestUnlockCancelledStillDeletes(t *testing.T) {
	c := newCluster(t, 5)
	d := c.driver(t, nil)
	r := driver.Request{Name: uniqueName("unlock-cancelled"), Owner: newOwner(), TTL: 10 * time.Second}
	if _, err := d.TryLock(t.Context(), r); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = d.Unlock(ctx, r) // nil if a quorum answered first, else the context's error
	if got := c.ownersAfter(r.Name, d); countOf(got, "") != 5 {
		t.Errorf("after an Unlock with a cancelled context, once every node answered, the nodes hold %q; want the key gone from all 5", got)
	}
}
