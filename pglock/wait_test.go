package pglock_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/locktest"
	"github.com/dlockgo/dlock/pglock"
)

// TestCancelledWaitLeavesNothingQueued: while an Acquire waits, pg_locks
// shows its request, not granted; once its context ends (deadline or
// cancel), the request is gone from pg_locks by the time Acquire returns.
func TestCancelledWaitLeavesNothingQueued(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm := newAdmin(t)
	a := newLocker(t, pglock.Options{})
	b := newLocker(t, pglock.Options{})
	name := "cancel/" + randomHex(4)
	lease, err := a.Acquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}

	for _, how := range []string{"deadline", "cancel"} {
		wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
		if how == "deadline" {
			wctx, wcancel = context.WithTimeout(ctx, 400*time.Millisecond)
		}
		seen := make(chan int, 1)
		go func() {
			// Watch the waiting request appear, then end the wait.
			ok := waitUntil(5*time.Second, func() bool { _, w := adm.lockRows(t, table, name); return w > 0 })
			_, w := adm.lockRows(t, table, name)
			seen <- w
			if how == "cancel" && ok {
				wcancel()
			}
		}()
		start := time.Now()
		l, err := b.Acquire(wctx, name)
		took := time.Since(start)
		wcancel()
		if err == nil {
			_ = l.Release(ctx)
			t.Fatalf("%s: Acquire succeeded while the lock was held", how)
		}
		want := context.DeadlineExceeded
		if how == "cancel" {
			want = context.Canceled
		}
		if !errors.Is(err, want) {
			t.Errorf("%s: Acquire = %v, want an error matching %v", how, err, want)
		}
		if w := <-seen; w != 1 {
			t.Errorf("%s: %d waiting requests in pg_locks during the wait, want 1", how, w)
		}
		holders, waiting := adm.lockRows(t, table, name)
		if waiting != 0 {
			t.Errorf("%s: %d waiting requests in pg_locks right after Acquire returned, want 0", how, waiting)
		}
		if len(holders) != 1 {
			t.Errorf("%s: holders %v, want only the first client's session", how, holders)
		}
		t.Logf("%s: Acquire returned after %v", how, took)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if holders, waiting := adm.lockRows(t, table, name); len(holders)+waiting != 0 {
		t.Errorf("after the release: holders %v and %d waiting, want none", holders, waiting)
	}
}

// TestNotReentrant: a driver never takes a lock on a session that already
// holds it (advisory locks are re-entrant within a session): a second
// acquisition of a name the same driver holds is refused, also after
// connections went back to the idle set.
func TestNotReentrant(t *testing.T) {
	ctx := testContext(t, 30*time.Second)
	d := newDriver(t, pglock.Options{})
	l, err := dlock.New(d)
	if err != nil {
		t.Fatal(err)
	}
	name := "reentrant/" + randomHex(4)
	for i := range 3 {
		lease, err := l.Acquire(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		// Other names in between, so that idle connections are reused.
		other, err := l.TryAcquire(ctx, name+"/other")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.TryAcquire(ctx, name); !errors.Is(err, dlock.ErrNotAcquired) {
			t.Fatalf("round %d: second TryAcquire through the same driver = %v, want ErrNotAcquired", i, err)
		}
		if held, ok := errors.AsType[*driver.HeldError](err); ok && held.Name != name {
			t.Errorf("HeldError.Name = %q", held.Name)
		}
		_ = other.Release(ctx)
		_ = lease.Release(ctx)
	}
	if n := pglock.Idle(d); n == 0 || n > pglock.DefaultMaxIdle {
		t.Errorf("%d idle connections, want 1..%d", n, pglock.DefaultMaxIdle)
	}
}

// TestManyHolders: one driver holds many locks at once, on one session
// (SessionLocks at its default) or each on its own (SessionLocks 1), and
// waiters on them each wait on a session of their own.
func TestManyHolders(t *testing.T) {
	for _, perSession := range []int{0, 1} {
		t.Run("session_locks="+strconv.Itoa(perSession), func(t *testing.T) {
			testManyHolders(t, perSession)
		})
	}
}

func testManyHolders(t *testing.T, perSession int) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	adm := newAdmin(t)
	a := newLocker(t, pglock.Options{SessionLocks: perSession})
	b := newLocker(t, pglock.Options{})
	const n = 12
	base := "many/" + randomHex(4) + "/"
	names := make([]string, n)
	leases := make([]*dlock.Lease, n)
	for i := range n {
		names[i] = base + string(rune('a'+i))
		var err error
		if leases[i], err = a.Acquire(ctx, names[i]); err != nil {
			t.Fatal(err)
		}
	}
	pids := map[uint32]bool{}
	for _, name := range names {
		holders, _ := adm.lockRows(t, table, name)
		if len(holders) != 1 {
			t.Fatalf("%q: holders %v", name, holders)
		}
		pids[holders[0]] = true
	}
	if want := map[int]int{0: 1, 1: n}[perSession]; len(pids) != want {
		t.Errorf("%d locks held on %d sessions, want %d", n, len(pids), want)
	}
	var wg sync.WaitGroup
	got := make([]*dlock.Lease, n)
	for i := range n {
		wg.Go(func() {
			var err error
			if got[i], err = b.Acquire(ctx, names[i]); err != nil {
				t.Error(err)
			}
		})
	}
	if !waitUntil(10*time.Second, func() bool {
		for _, name := range names {
			if _, w := adm.lockRows(t, table, name); w != 1 {
				return false
			}
		}
		return true
	}) {
		t.Fatal("not every waiter showed in pg_locks")
	}
	for i := range n {
		if err := leases[i].Release(ctx); err != nil {
			t.Error(err)
		}
	}
	wg.Wait()
	for i := range n {
		if got[i] != nil {
			if got[i].Token() <= leases[i].Token() {
				t.Errorf("%q: waiter's token %d not above the holder's %d", names[i], got[i].Token(), leases[i].Token())
			}
			_ = got[i].Release(ctx)
		}
	}
}

// TestCloseEndsWaitsAndHolds: closing a driver fails its waiting
// acquisitions with ErrClosed and ends its held locks, which the server
// then frees.
func TestCloseEndsWaitsAndHolds(t *testing.T) {
	ctx := testContext(t, 30*time.Second)
	adm := newAdmin(t)
	a := newDriver(t, pglock.Options{})
	b := newDriver(t, pglock.Options{})
	name := "close/" + randomHex(4)
	r := driver.Request{Name: name, Owner: randomHex(16), TTL: time.Minute}
	g, err := a.Lock(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	lost := locktest.LostCh(g)
	errc := make(chan error, 1)
	go func() {
		_, err := b.Lock(ctx, driver.Request{Name: name, Owner: randomHex(16), TTL: time.Minute})
		errc <- err
	}()
	if !waitUntil(5*time.Second, func() bool { _, w := adm.lockRows(t, table, name); return w == 1 }) {
		t.Fatal("the waiter never showed in pg_locks")
	}
	_ = b.Close()
	if err := <-errc; !errors.Is(err, dlock.ErrClosed) {
		t.Errorf("Lock cancelled by Close = %v, want ErrClosed", err)
	}
	if _, w := adm.lockRows(t, table, name); w != 0 {
		t.Errorf("%d waiting requests after Close, want 0", w)
	}
	_ = a.Close()
	select {
	case <-lost:
	case <-time.After(time.Second):
		t.Error("loss not signalled by Close")
	}
	if !waitUntil(5*time.Second, func() bool { h, _ := adm.lockRows(t, table, name); return len(h) == 0 }) {
		t.Error("the closed driver's lock is still held on the server")
	}
	if _, err := a.TryLock(ctx, r); !errors.Is(err, dlock.ErrClosed) {
		t.Errorf("TryLock after Close = %v, want ErrClosed", err)
	}
}

// TestServerTimeoutsEndWaits: a lock_timeout or statement_timeout given as
// a run-time setting bounds waits on the server; the wait then fails with
// ErrNotAcquired and leaves nothing queued.
func TestServerTimeoutsEndWaits(t *testing.T) {
	ctx := testContext(t, 30*time.Second)
	adm := newAdmin(t)
	a := newLocker(t, pglock.Options{})
	name := "server-timeout/" + randomHex(4)
	lease, err := a.Acquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(ctx)
	for _, setting := range []string{"lock_timeout", "statement_timeout"} {
		l, err := dlock.Open(ctx, testURL(t, "", "table", table, setting, "300ms"))
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		_, err = l.Acquire(ctx, name)
		took := time.Since(start)
		if !errors.Is(err, dlock.ErrNotAcquired) {
			t.Errorf("%s: Acquire = %v, want ErrNotAcquired", setting, err)
		}
		if took < 300*time.Millisecond || took > 3*time.Second {
			t.Errorf("%s=300ms: Acquire returned after %v", setting, took)
		}
		if _, w := adm.lockRows(t, table, name); w != 0 {
			t.Errorf("%s: %d waiting requests left", setting, w)
		}
		_ = l.Close()
	}
}

// TestDeadIdleConnection: an idle connection whose session ended (an
// operator, a server restart, idle_session_timeout) is replaced on use;
// the acquisition does not fail for it.
func TestDeadIdleConnection(t *testing.T) {
	ctx := testContext(t, 30*time.Second)
	adm := newAdmin(t)
	d := newDriver(t, pglock.Options{})
	pids := pglock.IdlePIDs(d)
	if len(pids) != 1 {
		t.Fatalf("idle sessions %v, want the one NewDriver opened", pids)
	}
	adm.exec(t, "SELECT pg_terminate_backend($1, 5000)", int32(pids[0]))
	for _, wait := range []bool{false, true} {
		r := driver.Request{Name: "dead-idle/" + randomHex(4), Owner: randomHex(16), TTL: time.Minute}
		lock := d.TryLock
		if wait {
			lock = d.Lock
		}
		if _, err := lock(ctx, r); err != nil {
			t.Fatalf("wait=%v: %v", wait, err)
		}
		if err := d.Unlock(ctx, r); err != nil {
			t.Fatal(err)
		}
		if wait {
			break
		}
		// Kill the idle connection again for the waiting variant.
		pids = pglock.IdlePIDs(d)
		adm.exec(t, "SELECT pg_terminate_backend($1, 5000)", int32(pids[0]))
	}
}
