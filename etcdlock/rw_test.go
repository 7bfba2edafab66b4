package etcdlock_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/locktest"
)

// queue returns the keys under a queue prefix (for example
// prefix+"/#rw/name/#"), oldest first.
func queue(t testing.TB, admin *clientv3.Client, qprefix string) []*mvccpb.KeyValue {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := admin.Get(ctx, qprefix, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		t.Fatalf("read the queue %q: %v", qprefix, err)
	}
	return resp.Kvs
}

// waitQueue waits until n keys are under qprefix.
func waitQueue(t testing.TB, admin *clientv3.Client, qprefix string, n int) []*mvccpb.KeyValue {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		kvs := queue(t, admin, qprefix)
		if len(kvs) == n {
			return kvs
		}
		if time.Now().After(deadline) {
			t.Fatalf("%q: %d keys, want %d", qprefix, len(kvs), n)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// waitWatches waits until the counter has seen n watches in all.
func waitWatches(t testing.TB, c *watchCounter, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(2 * time.Millisecond) {
		if w, _ := c.totals(); w >= n {
			return
		}
		if time.Now().After(deadline) {
			w, _ := c.totals()
			t.Fatalf("%d watches, want %d", w, n)
		}
	}
}

// pending is an acquisition running in the background.
type pending struct {
	lease chan *dlock.Lease
	err   chan error
}

func start(acquire func() (*dlock.Lease, error)) pending {
	p := pending{lease: make(chan *dlock.Lease, 1), err: make(chan error, 1)}
	go func() {
		l, err := acquire()
		if err != nil {
			p.err <- err
			return
		}
		p.lease <- l
	}()
	return p
}

// get waits for the acquisition, failing t after 30s: a hang bound, over
// 10× the TTL of 2-3s some waits here take to expire a crashed holder.
func (p pending) get(t testing.TB, who string) *dlock.Lease {
	t.Helper()
	select {
	case l := <-p.lease:
		return l
	case err := <-p.err:
		t.Fatalf("%s: %v", who, err)
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not acquire within 30s", who)
	}
	return nil
}

// notYet checks that the acquisition is still waiting.
func (p pending) notYet(t testing.TB, who string) {
	t.Helper()
	time.Sleep(50 * time.Millisecond)
	select {
	case l := <-p.lease:
		t.Fatalf("%s acquired (token %d), want it still waiting", who, l.Token())
	case err := <-p.err:
		t.Fatalf("%s: %v, want it still waiting", who, err)
	default:
	}
}

// TestRWReadersTogether: readers hold together, with distinct tokens; a
// writer can't while they do, and readers can't while a writer holds.
func TestRWReadersTogether(t *testing.T) {
	eps := testenv.EtcdEndpoints(t)
	prefix := randomPrefix()
	ctx := locktest.Context(t, 30*time.Second)
	a, b := newLocker(t, eps, prefix), newLocker(t, eps, prefix)
	var readers []*dlock.Lease
	tokens := map[uint64]bool{}
	for i, l := range []*dlock.Locker{a, b, a} {
		r, err := l.TryAcquireRead(ctx, "rw")
		if err != nil {
			t.Fatalf("reader %d: %v", i, err)
		}
		if tokens[r.Token()] {
			t.Errorf("reader %d: token %d given twice", i, r.Token())
		}
		tokens[r.Token()] = true
		readers = append(readers, r)
	}
	if _, err := b.TryAcquireWrite(ctx, "rw"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryAcquireWrite while 3 readers hold = %v, want ErrNotAcquired", err)
	}
	// The mutex "rw" is another lock.
	m, err := b.TryAcquire(ctx, "rw")
	if err != nil {
		t.Fatalf("the mutex of the same name: %v", err)
	}
	_ = m.Release(ctx)
	for _, r := range readers {
		if err := r.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	w, err := b.TryAcquireWrite(ctx, "rw")
	if err != nil {
		t.Fatalf("TryAcquireWrite once the readers left: %v", err)
	}
	for tok := range tokens {
		if w.Token() <= tok {
			t.Errorf("writer's token %d not above reader's %d", w.Token(), tok)
		}
	}
	if _, err := a.TryAcquireRead(ctx, "rw"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("TryAcquireRead while a writer holds = %v, want ErrNotAcquired", err)
	}
	if _, err := a.TryAcquireWrite(ctx, "rw"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("TryAcquireWrite while a writer holds = %v, want ErrNotAcquired", err)
	}
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestRWWaitersWatchOnlyWhatTheyNeed queues W0 (holding), R1, R2, W1, R3
// in that order, each on a client of its own. The readers R1 and R2 watch
// W0, W1 watches R2, R3 watches W1 and nothing else is watched. W0's
// release admits R1 and R2 together; R1's release wakes nobody; R2's
// admits W1, and W1's R3. A waiting writer blocks later readers
// (TryAcquireRead fails), and tokens grow with each admission.
func TestRWWaitersWatchOnlyWhatTheyNeed(t *testing.T) {
	eps, admin, prefix, ctx := fixture(t, 60*time.Second)
	q := prefix + "/#rw/doc/#"
	lockers, counter := countedLockers(t, eps, prefix, 5)
	w0, err := lockers[0].AcquireWrite(ctx, "doc")
	if err != nil {
		t.Fatal(err)
	}
	r1 := start(func() (*dlock.Lease, error) { return lockers[1].AcquireRead(ctx, "doc") })
	waitQueue(t, admin, q, 2)
	r2 := start(func() (*dlock.Lease, error) { return lockers[2].AcquireRead(ctx, "doc") })
	waitQueue(t, admin, q, 3)
	w1 := start(func() (*dlock.Lease, error) { return lockers[3].AcquireWrite(ctx, "doc") })
	waitQueue(t, admin, q, 4)
	r3 := start(func() (*dlock.Lease, error) { return lockers[4].AcquireRead(ctx, "doc") })
	keys := waitQueue(t, admin, q, 5)
	waitWatches(t, counter, 4)
	time.Sleep(50 * time.Millisecond) // no further watch may start

	counter.expect(t, map[string]int{string(keys[0].Key): 2, string(keys[2].Key): 1, string(keys[3].Key): 1})
	if _, err := lockers[0].TryAcquireRead(ctx, "doc"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("TryAcquireRead while a writer holds and another waits = %v, want ErrNotAcquired", err)
	}

	if err := w0.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l1, l2 := r1.get(t, "R1"), r2.get(t, "R2") // together
	w1.notYet(t, "W1")
	r3.notYet(t, "R3")
	if l1.Token() == l2.Token() || l1.Token() <= w0.Token() || l2.Token() <= w0.Token() {
		t.Errorf("tokens: W0 %d, R1 %d, R2 %d; want the readers' distinct and above W0's", w0.Token(), l1.Token(), l2.Token())
	}
	if err := l1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	w1.notYet(t, "W1")
	counter.mu.Lock()
	if n := counter.wakes[string(keys[1].Key)]; n != 0 {
		t.Errorf("R1's release woke %d waiters, want none", n)
	}
	counter.mu.Unlock()
	if err := l2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lw1 := w1.get(t, "W1")
	r3.notYet(t, "R3")
	if lw1.Token() <= max(l1.Token(), l2.Token()) {
		t.Errorf("W1's token %d not above the readers' %d, %d", lw1.Token(), l1.Token(), l2.Token())
	}
	if err := lw1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l3 := r3.get(t, "R3")
	if l3.Token() <= lw1.Token() {
		t.Errorf("R3's token %d not above W1's %d", l3.Token(), lw1.Token())
	}
	_ = l3.Release(ctx)
	watches, wakes := counter.totals()
	t.Logf("%d watches, %d wake-ups, %d re-queues", watches, wakes, counter.requeues.Load())
	if watches != 4 || wakes != 4 {
		t.Errorf("%d watches and %d wake-ups; want 4 of each (R1, R2 by W0; W1 by R2; R3 by W1)", watches, wakes)
	}
}

// TestRWTokensAndExclusion: 12 goroutines on 4 clients mix reads and
// writes. A writer never overlaps anyone; every token is distinct; a
// writer's token is above every token recorded before it, and every token
// recorded after its release is above it.
func TestRWTokensAndExclusion(t *testing.T) {
	eps := testenv.EtcdEndpoints(t)
	prefix := randomPrefix()
	ctx := locktest.Context(t, 60*time.Second)
	lockers := make([]*dlock.Locker, 4)
	for i := range lockers {
		lockers[i] = newLocker(t, eps, prefix)
	}
	type rec struct {
		token uint64
		write bool
		end   bool // the release of a writer
	}
	var (
		mu               sync.Mutex
		readers, writers int
		recs             []rec
		wg               sync.WaitGroup
		maxReaders       int
	)
	for g := range 12 {
		wg.Go(func() {
			l := lockers[g%len(lockers)]
			for i := range 6 {
				write := (g+i)%3 == 0
				var lease *dlock.Lease
				var err error
				if write {
					lease, err = l.AcquireWrite(ctx, "mixed")
				} else {
					lease, err = l.AcquireRead(ctx, "mixed")
				}
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if write {
					writers++
					if writers > 1 || readers > 0 {
						t.Errorf("a writer holds with %d writers and %d readers", writers, readers)
					}
				} else {
					readers++
					maxReaders = max(maxReaders, readers)
					if writers > 0 {
						t.Errorf("a reader holds with a writer")
					}
				}
				recs = append(recs, rec{token: lease.Token(), write: write})
				mu.Unlock()
				time.Sleep(2 * time.Millisecond)
				mu.Lock()
				if write {
					writers--
					recs = append(recs, rec{token: lease.Token(), write: true, end: true})
				} else {
					readers--
				}
				mu.Unlock()
				if err := lease.Release(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	seen := map[uint64]bool{}
	var highest, floor uint64
	for _, r := range recs {
		if r.end {
			floor = max(floor, r.token)
			continue
		}
		if seen[r.token] {
			t.Errorf("token %d granted twice", r.token)
		}
		seen[r.token] = true
		if r.token <= floor {
			t.Errorf("token %d granted after a writer with token %d had held", r.token, floor)
		}
		if r.write && r.token <= highest {
			t.Errorf("writer's token %d not above an earlier grant's %d", r.token, highest)
		}
		highest = max(highest, r.token)
	}
	t.Logf("%d grants; up to %d readers at once", len(seen), maxReaders)
	if maxReaders < 2 {
		t.Errorf("never more than %d reader at once: readers are not admitted together", maxReaders)
	}
}

// TestKindsUnlockOwnOnly: Renew and Unlock act only for the owner, in
// the mode it holds.
func TestKindsUnlockOwnOnly(t *testing.T) {
	eps, admin, prefix, ctx := fixture(t, 20*time.Second)
	l := newLocker(t, eps, prefix)
	d := drv(l)
	for _, r := range []driver.Request{
		{Name: "own", Owner: "o1", TTL: time.Second, Mode: driver.Read},
		{Name: "own", Owner: "o3", TTL: time.Second, Mode: driver.Permit, Limit: 2},
		{Name: "own", Owner: "o4", TTL: time.Second, Mode: driver.Leader, Value: "me"},
	} {
		if _, err := d.TryLock(ctx, r); err != nil {
			t.Fatalf("%v: %v", r.Mode, err)
		}
		other := r
		other.Owner = "someone else"
		if err := d.Unlock(ctx, other); !errors.Is(err, driver.ErrNotHeld) {
			t.Errorf("%v: Unlock by another owner = %v, want ErrNotHeld", r.Mode, err)
		}
		if _, err := d.Renew(ctx, other); !errors.Is(err, driver.ErrNotHeld) {
			t.Errorf("%v: Renew by another owner = %v, want ErrNotHeld", r.Mode, err)
		}
		wrong := r
		wrong.Mode = driver.Exclusive
		if err := d.Unlock(ctx, wrong); !errors.Is(err, driver.ErrNotHeld) {
			t.Errorf("%v: Unlock as a mutex = %v, want ErrNotHeld", r.Mode, err)
		}
		if _, err := d.Renew(ctx, r); err != nil {
			t.Errorf("%v: Renew by the owner: %v", r.Mode, err)
		}
	}
	for _, q := range []string{prefix + "/#rw/own/#", prefix + "/#sem/own/#", prefix + "/#elect/own/#"} {
		if n := len(queue(t, admin, q)); n != 1 {
			t.Errorf("%q: %d keys, want 1", q, n)
		}
	}
	for _, r := range []driver.Request{
		{Name: "own", Owner: "o1", Mode: driver.Read},
		{Name: "own", Owner: "o3", Mode: driver.Permit, Limit: 2},
		{Name: "own", Owner: "o4", Mode: driver.Leader, Value: "me"},
	} {
		if err := d.Unlock(ctx, r); err != nil {
			t.Errorf("%v: Unlock by the owner: %v", r.Mode, err)
		}
		if err := d.Unlock(ctx, r); !errors.Is(err, driver.ErrNotHeld) {
			t.Errorf("%v: second Unlock = %v, want ErrNotHeld", r.Mode, err)
		}
	}
	if n := countKeys(t, admin, prefix, "own"); n != 0 {
		t.Errorf("%d mutex keys, want 0", n)
	}
	resp, err := admin.Get(ctx, prefix+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	if resp.Count != 0 {
		t.Errorf("%d keys left after every release", resp.Count)
	}
}
