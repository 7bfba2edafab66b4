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

func rwKey(name string) int64 { return pglock.ModeKey(table, driver.Write, name, 0) }

// TestKeysOfEachKind: the mutex, readers-writer lock, semaphore and
// election called name are four locks.
func TestKeysOfEachKind(t *testing.T) {
	ctx := testContext(t, 20*time.Second)
	l := newLocker(t, pglock.Options{})
	name := "kinds/" + randomHex(4)
	keys := map[int64]string{}
	for _, k := range []struct {
		what string
		key  int64
	}{
		{"mutex", pglock.Key(table, name)},
		{"rw", rwKey(name)},
		{"slot 0", pglock.ModeKey(table, driver.Permit, name, 0)},
		{"slot 1", pglock.ModeKey(table, driver.Permit, name, 1)},
		{"leader", pglock.ModeKey(table, driver.Leader, name, 0)},
	} {
		if other, dup := keys[k.key]; dup {
			t.Errorf("%s and %s share key %d", k.what, other, k.key)
		}
		keys[k.key] = k.what
	}
	if pglock.ModeKey(table, driver.Read, name, 0) != rwKey(name) {
		t.Error("Read and Write have different keys")
	}
	mu := mustLease(t)(l.TryAcquire(ctx, name))
	w := mustLease(t)(l.TryAcquireWrite(ctx, name))
	p := mustLease(t)(l.TryAcquirePermit(ctx, name, 1))
	e := mustLease(t)(l.Campaign(ctx, name, "me"))
	for _, lease := range []*dlock.Lease{mu, w, p, e} {
		if err := lease.Release(ctx); err != nil {
			t.Error(err)
		}
	}
}

func mustLease(t *testing.T) func(*dlock.Lease, error) *dlock.Lease {
	return func(l *dlock.Lease, err error) *dlock.Lease {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
}

// TestReadersOverlap: readers hold together, with distinct increasing
// tokens; a writer excludes them and they exclude it.
func TestReadersOverlap(t *testing.T) {
	ctx := testContext(t, 20*time.Second)
	a, b := newLocker(t, pglock.Options{}), newLocker(t, pglock.Options{})
	name := "rw/overlap/" + randomHex(4)
	r1 := mustLease(t)(a.TryAcquireRead(ctx, name))
	r2 := mustLease(t)(b.TryAcquireRead(ctx, name))
	if r2.Token() <= r1.Token() {
		t.Errorf("reader tokens %d then %d: want increasing", r1.Token(), r2.Token())
	}
	adm := newAdmin(t)
	if h, _ := adm.keyRows(t, rwKey(name)); len(h) != 2 {
		t.Errorf("pg_locks shows %d holders, want 2 readers", len(h))
	}
	if _, err := b.TryAcquireWrite(ctx, name); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("TryAcquireWrite with readers in = %v, want ErrNotAcquired", err)
	}
	release(t, ctx, r1, r2)
	w := mustLease(t)(a.TryAcquireWrite(ctx, name))
	if w.Token() <= r2.Token() {
		t.Errorf("writer token %d after reader's %d", w.Token(), r2.Token())
	}
	if _, err := b.TryAcquireRead(ctx, name); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("TryAcquireRead with a writer in = %v, want ErrNotAcquired", err)
	}
	// Renew checks the lock in its own mode.
	if err := w.Renew(ctx); err != nil {
		t.Errorf("Renew of the writer: %v", err)
	}
	release(t, ctx, w)
}

func release(t *testing.T, ctx context.Context, leases ...*dlock.Lease) {
	t.Helper()
	for _, l := range leases {
		if err := l.Release(ctx); err != nil {
			t.Errorf("Release(%q, %v): %v", l.Name(), l.Mode(), err)
		}
	}
}

// TestWriterPreference: a writer waiting behind a reader blocks the
// readers that come after it, on the server (PostgreSQL's lock queue), and
// is served before them.
func TestWriterPreference(t *testing.T) {
	ctx := testContext(t, 30*time.Second)
	a, b, c := newLocker(t, pglock.Options{}), newLocker(t, pglock.Options{}), newLocker(t, pglock.Options{})
	adm := newAdmin(t)
	name := "rw/pref/" + randomHex(4)
	r1 := mustLease(t)(a.AcquireRead(ctx, name))

	var order []string
	var mu sync.Mutex
	note := func(s string) { mu.Lock(); order = append(order, s); mu.Unlock() }
	// queue runs acquire in the background, noting who once it is in, and
	// waits until the server shows queued requests for the key.
	queue := func(who string, acquire func(context.Context, string, ...dlock.Option) (*dlock.Lease, error), queued int) <-chan *dlock.Lease {
		done := make(chan *dlock.Lease, 1)
		go func() {
			l, err := acquire(ctx, name)
			if err != nil {
				t.Error(err)
			}
			note(who)
			done <- l
		}()
		if !waitUntil(5*time.Second, func() bool { _, n := adm.keyRows(t, rwKey(name)); return n == queued }) {
			t.Fatalf("the %s is not queued", who)
		}
		return done
	}
	wDone := queue("writer", b.AcquireWrite, 1)
	// A reader arriving now cannot get in, neither by try nor by waiting.
	if _, err := c.TryAcquireRead(ctx, name); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryAcquireRead behind a waiting writer = %v, want ErrNotAcquired", err)
	}
	rDone := queue("second reader", c.AcquireRead, 2)
	time.Sleep(100 * time.Millisecond)
	mu.Lock()
	if len(order) != 0 {
		t.Errorf("%v got in while the first reader held the lock", order)
	}
	mu.Unlock()
	release(t, ctx, r1)
	w := <-wDone
	time.Sleep(100 * time.Millisecond)
	mu.Lock()
	if len(order) != 1 || order[0] != "writer" {
		t.Errorf("after the first reader left: %v, want [writer] alone", order)
	}
	mu.Unlock()
	release(t, ctx, w)
	r2 := <-rDone
	if r2.Token() <= w.Token() {
		t.Errorf("reader token %d after the writer's %d", r2.Token(), w.Token())
	}
	release(t, ctx, r2)
}

// TestConsecutiveReadersTogether: readers queued behind a writer are
// admitted together when it leaves. Each reader has a driver of its own,
// as processes would: a driver queues one reader per lock on the server.
func TestConsecutiveReadersTogether(t *testing.T) {
	ctx := testContext(t, 30*time.Second)
	l := newLocker(t, pglock.Options{MaxIdle: 8})
	adm := newAdmin(t)
	name := "rw/together/" + randomHex(4)
	w := mustLease(t)(l.AcquireWrite(ctx, name))
	const readers = 4
	var in atomic.Int32
	var wg sync.WaitGroup
	leases := make(chan *dlock.Lease, readers)
	for range readers {
		rl := newLocker(t, pglock.Options{})
		wg.Go(func() {
			r, err := rl.AcquireRead(ctx, name)
			if err != nil {
				t.Error(err)
				return
			}
			in.Add(1)
			leases <- r
		})
	}
	if !waitUntil(5*time.Second, func() bool { _, n := adm.keyRows(t, rwKey(name)); return n == readers }) {
		t.Fatal("the readers are not queued")
	}
	release(t, ctx, w)
	if !waitUntil(5*time.Second, func() bool { return in.Load() == readers }) {
		t.Fatalf("%d of %d readers got in while none released", in.Load(), readers)
	}
	wg.Wait()
	close(leases)
	for r := range leases {
		release(t, ctx, r)
	}
}

// TestCancelledServerWaits: a wait on the server (writer, reader, permit,
// candidate) whose context ends returns promptly and leaves nothing
// queued or held.
func TestCancelledServerWaits(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a, b := newLocker(t, pglock.Options{}), newLocker(t, pglock.Options{})
	adm := newAdmin(t)
	name := "cancel/" + randomHex(4)
	for _, c := range []struct {
		what string
		hold func() (*dlock.Lease, error)
		wait func(context.Context) (*dlock.Lease, error)
		keys []int64
	}{
		{"write", func() (*dlock.Lease, error) { return a.AcquireRead(ctx, name) },
			func(ctx context.Context) (*dlock.Lease, error) { return b.AcquireWrite(ctx, name) }, []int64{rwKey(name)}},
		{"read", func() (*dlock.Lease, error) { return a.AcquireWrite(ctx, name) },
			func(ctx context.Context) (*dlock.Lease, error) { return b.AcquireRead(ctx, name) }, []int64{rwKey(name)}},
		{"permit", func() (*dlock.Lease, error) { return a.AcquirePermit(ctx, name, 1) },
			func(ctx context.Context) (*dlock.Lease, error) { return b.AcquirePermit(ctx, name, 1) },
			[]int64{pglock.ModeKey(table, driver.Permit, name, 0)}},
		{"leader", func() (*dlock.Lease, error) { return a.Campaign(ctx, name, "a") },
			func(ctx context.Context) (*dlock.Lease, error) { return b.Campaign(ctx, name, "b") },
			[]int64{pglock.ModeKey(table, driver.Leader, name, 0)}},
	} {
		t.Run(c.what, func(t *testing.T) {
			h := mustLease(t)(c.hold())
			wctx, wcancel := context.WithCancel(ctx)
			errc := make(chan error, 1)
			go func() {
				l, err := c.wait(wctx)
				if err == nil {
					_ = l.Release(ctx)
				}
				errc <- err
			}()
			if !waitUntil(5*time.Second, func() bool { _, n := adm.keyRows(t, c.keys[0]); return n == 1 }) {
				t.Fatal("the waiter is not queued on the server")
			}
			start := time.Now()
			wcancel()
			err := <-errc
			if took := time.Since(start); took > time.Second {
				t.Errorf("the cancelled wait returned after %v", took)
			}
			if !errors.Is(err, context.Canceled) {
				t.Errorf("cancelled wait = %v, want context.Canceled", err)
			}
			for _, k := range c.keys {
				if holders, waiting := adm.keyRows(t, k); len(holders) != 1 || waiting != 0 {
					t.Errorf("after the cancel: %d holders, %d waiting; want the 1 holder alone", len(holders), waiting)
				}
			}
			release(t, ctx, h)
		})
	}
}

// TestSemaphoreLimit: 32 goroutines on 4 Lockers take permits of a
// semaphore of 3; never more than 3 hold at once, the limit is reached,
// and tokens are distinct.
func TestSemaphoreLimit(t *testing.T) {
	ctx := testContext(t, 60*time.Second)
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
	ctx := testContext(t, 20*time.Second)
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
	ctx := testContext(t, 30*time.Second)
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
	goTake(t, got, func() (*dlock.Lease, error) { return b.AcquirePermit(ctx, name, limit) })
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
	ctx := testContext(t, 30*time.Second)
	name := "sem/crash/" + randomHex(4)
	const limit = 2
	crasher := newLocker(t, pglock.Options{Keepalive: 200 * time.Millisecond})
	other := newLocker(t, pglock.Options{})
	p1 := mustLease(t)(crasher.AcquirePermit(ctx, name, limit))
	p2 := mustLease(t)(other.AcquirePermit(ctx, name, limit))
	got := make(chan *dlock.Lease, 2)
	waiter := newLocker(t, pglock.Options{})
	goTake(t, got, func() (*dlock.Lease, error) { return waiter.AcquirePermit(ctx, name, limit) })
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
	quiet(t, got, 100*time.Millisecond, "a permit was granted beyond the limit")
	// A second waiter covers the other slot, so that whichever slot the
	// crasher had, someone waits on it.
	goTake(t, got, func() (*dlock.Lease, error) { return waiter.AcquirePermit(ctx, name, limit) })
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
	quiet(t, got, 200*time.Millisecond, "a permit was granted beyond the limit after the crash")
	release(t, ctx, p2)
	second := <-got
	release(t, ctx, first, second)
}

// TestCrashedPermitLoneWaiter: a lone waiter blocked on one holder's slot
// gets the permit another holder's crash frees, though no release
// notifies it: it tries again once it has been blocked for its TTL.
func TestCrashedPermitLoneWaiter(t *testing.T) {
	ctx := testContext(t, 60*time.Second)
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
	goTake(t, got, func() (*dlock.Lease, error) { return waiter.AcquirePermit(ctx, name, limit) })
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
