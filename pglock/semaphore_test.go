package pglock_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/pglock"
)

// TestSemaphoreLimit: 32 goroutines on 4 Lockers take permits of a
// semaphore of 3; never more than 3 hold at once, the limit is reached,
// and tokens are distinct.
func TestSemaphoreLimit(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const (
		limit   = 3
		workers = 32
		rounds  = 3
	)
	lockers := make([]*dlock.Locker, 4)
	for i := range lockers {
		lockers[i] = newLocker(t, pglock.Options{MaxIdle: workers})
	}
	name := "sem/limit/" + randomHex(4)
	var in, peak atomic.Int32
	var mu sync.Mutex
	tokens := map[uint64]bool{}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			l := lockers[w%len(lockers)]
			for range rounds {
				p, err := l.AcquirePermit(ctx, name, limit)
				if err != nil {
					t.Error(err)
					return
				}
				n := in.Add(1)
				for {
					old := peak.Load()
					if n <= old || peak.CompareAndSwap(old, n) {
						break
					}
				}
				if n > limit {
					t.Errorf("%d permit holders at once, limit %d", n, limit)
				}
				mu.Lock()
				if tokens[p.Token()] {
					t.Errorf("token %d granted twice", p.Token())
				}
				tokens[p.Token()] = true
				mu.Unlock()
				// Long enough that the holders overlap even when a
				// statement takes several milliseconds (32 sessions on a
				// small machine, -race): the limit must be reached.
				time.Sleep(20 * time.Millisecond)
				in.Add(-1)
				if err := p.Release(ctx); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if peak.Load() != limit {
		t.Errorf("at most %d holders at once, want the limit %d reached", peak.Load(), limit)
	}
	if len(tokens) != workers*rounds {
		t.Errorf("%d distinct tokens for %d grants", len(tokens), workers*rounds)
	}
}

// TestTryPermit: TryAcquirePermit gets the free slots, then fails; the
// slots one driver holds share its session.
func TestTryPermit(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l := newLocker(t, pglock.Options{MaxIdle: 8})
	adm := newAdmin(t)
	name := "sem/try/" + randomHex(4)
	const limit = 3
	var leases []*dlock.Lease
	pids := map[uint32]int{}
	for range limit {
		p := mustLease(t)(l.TryAcquirePermit(ctx, name, limit))
		leases = append(leases, p)
	}
	for i := range limit {
		h, _ := adm.keyRows(t, pglock.ModeKey(table, driver.Permit, name, i))
		if len(h) != 1 {
			t.Errorf("slot %d has %d holders, want 1", i, len(h))
		}
		for _, pid := range h {
			pids[pid]++
		}
	}
	if len(pids) != 1 {
		t.Errorf("%d sessions hold the %d slots: %v, want one (slots share a session)", len(pids), limit, pids)
	}
	if _, err := l.TryAcquirePermit(ctx, name, limit); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("TryAcquirePermit with every permit held = %v, want ErrNotAcquired", err)
	}
	release(t, ctx, leases[1])
	p := mustLease(t)(l.TryAcquirePermit(ctx, name, limit))
	if p.Token() <= leases[2].Token() {
		t.Errorf("token %d after %d", p.Token(), leases[2].Token())
	}
	release(t, ctx, leases[0], leases[2], p)
}

// TestPermitWaiterWokenByRelease: waiters blocked on other slots than the
// one released are notified and take it.
func TestPermitWaiterWokenByRelease(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, b := newLocker(t, pglock.Options{}), newLocker(t, pglock.Options{})
	name := "sem/wake/" + randomHex(4)
	const limit = 4
	var held []*dlock.Lease
	for range limit {
		held = append(held, mustLease(t)(a.AcquirePermit(ctx, name, limit)))
	}
	adm := newAdmin(t)
	// One waiter: it blocks on one slot; releasing each other slot in turn
	// must reach it, whichever it blocks on.
	got := make(chan *dlock.Lease, 1)
	go func() {
		p, err := b.AcquirePermit(ctx, name, limit)
		if err != nil {
			t.Error(err)
		}
		got <- p
	}()
	blocked := blockedSlot(t, adm, name, limit, 5*time.Second)
	// Release a slot other than the one it blocks on: only the
	// notification can wake it.
	other := (blocked + 1) % limit
	pid := slotHolder(t, adm, name, other)
	var victim *dlock.Lease
	for _, p := range held {
		if pglock.HolderPID(a.Driver().(*pglock.Driver), p.Owner()) == pid {
			victim = p
		}
	}
	if victim == nil {
		t.Fatal("no lease holds the slot")
	}
	start := time.Now()
	release(t, ctx, victim)
	select {
	case p := <-got:
		t.Logf("the waiter took the released permit %v after the release", time.Since(start))
		release(t, ctx, p)
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter did not take the released permit")
	}
	for _, p := range held {
		if p != victim {
			release(t, ctx, p)
		}
	}
}

// blockedSlot waits, at most d, until one waiter is blocked on a slot of
// semaphore name, and returns that slot.
func blockedSlot(t *testing.T, adm *admin, name string, limit int, d time.Duration) int {
	t.Helper()
	slot := -1
	if !waitUntil(d, func() bool {
		for i := range limit {
			if _, n := adm.keyRows(t, pglock.ModeKey(table, driver.Permit, name, i)); n == 1 {
				slot = i
				return true
			}
		}
		return false
	}) {
		t.Fatal("the waiter is not blocked on any slot")
	}
	return slot
}

func slotHolder(t *testing.T, adm *admin, name string, slot int) uint32 {
	h, _ := adm.keyRows(t, pglock.ModeKey(table, driver.Permit, name, slot))
	if len(h) != 1 {
		t.Fatalf("slot %d: %d holders", slot, len(h))
	}
	return h[0]
}

// TestCrashedPermitReturns: a holder that crashes gives its permit to a
// waiter, without any release.
func TestCrashedPermitReturns(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	name := "sem/crash/" + randomHex(4)
	const limit = 2
	crasher := newLocker(t, pglock.Options{Keepalive: 200 * time.Millisecond})
	other := newLocker(t, pglock.Options{})
	p1 := mustLease(t)(crasher.AcquirePermit(ctx, name, limit))
	p2 := mustLease(t)(other.AcquirePermit(ctx, name, limit))
	got := make(chan *dlock.Lease, 2)
	waiter := newLocker(t, pglock.Options{})
	go func() {
		p, err := waiter.AcquirePermit(ctx, name, limit)
		if err != nil {
			t.Error(err)
		}
		got <- p
	}()
	adm := newAdmin(t)
	// The waiter blocks on the slot with fewest waiters; make sure it is
	// the crasher's by waiting, then check which.
	if !waitUntil(5*time.Second, func() bool {
		n := 0
		for i := range limit {
			_, w := adm.keyRows(t, pglock.ModeKey(table, driver.Permit, name, i))
			n += w
		}
		return n == 1
	}) {
		t.Fatal("the waiter is not blocked")
	}
	select {
	case <-got:
		t.Fatal("a permit was granted beyond the limit")
	case <-time.After(100 * time.Millisecond):
	}
	// A second waiter covers the other slot, so that whichever slot the
	// crasher had, someone waits on it.
	go func() {
		p, err := waiter.AcquirePermit(ctx, name, limit)
		if err != nil {
			t.Error(err)
		}
		got <- p
	}()
	start := time.Now()
	pglock.Crash(crasher.Driver().(*pglock.Driver))
	var first *dlock.Lease
	select {
	case first = <-got:
		t.Logf("a waiter took the crashed holder's permit %v after the crash", time.Since(start))
	case <-time.After(10 * time.Second):
		t.Fatal("the crashed holder's permit did not return")
	}
	select {
	case <-p1.Done():
	case <-time.After(10 * time.Second):
		t.Error("the crashed holder's lease did not end")
	}
	select {
	case <-got:
		t.Error("a permit was granted beyond the limit after the crash")
	case <-time.After(200 * time.Millisecond):
	}
	release(t, ctx, p2)
	second := <-got
	release(t, ctx, first, second)
}

// TestCrashedPermitLoneWaiter: a lone waiter blocked on one holder's slot
// gets the permit another holder's crash frees, though no release
// notifies it: it tries again once it has been blocked for its TTL.
func TestCrashedPermitLoneWaiter(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	name := "sem/lone/" + randomHex(4)
	const limit = 2
	const ttl = time.Second
	holders := []*dlock.Locker{newLocker(t, pglock.Options{}), newLocker(t, pglock.Options{})}
	leases := []*dlock.Lease{
		mustLease(t)(holders[0].AcquirePermit(ctx, name, limit)),
		mustLease(t)(holders[1].AcquirePermit(ctx, name, limit)),
	}
	waiter := newLocker(t, pglock.Options{}, dlock.WithTTL(ttl))
	got := make(chan *dlock.Lease, 1)
	go func() {
		p, err := waiter.AcquirePermit(ctx, name, limit)
		if err != nil {
			t.Error(err)
		}
		got <- p
	}()
	adm := newAdmin(t)
	blockedOn := blockedSlot(t, adm, name, limit, 10*time.Second)
	// Crash the holder of the slot the waiter does not block on.
	victimPID := slotHolder(t, adm, name, 1-blockedOn)
	victim := -1
	for i, l := range holders {
		if pglock.HolderPID(l.Driver().(*pglock.Driver), leases[i].Owner()) == victimPID {
			victim = i
		}
	}
	if victim < 0 {
		t.Fatalf("no holder has the server process %d", victimPID)
	}
	pglock.Crash(holders[victim].Driver().(*pglock.Driver))
	select {
	case p := <-got:
		release(t, ctx, p)
	case <-time.After(10 * ttl):
		t.Fatalf("the waiter, blocked on slot %d, did not get the permit the crash freed on slot %d", blockedOn, 1-blockedOn)
	}
	release(t, ctx, leases[1-victim])
}
