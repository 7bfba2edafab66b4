package filelock_test

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/filelock"
	"github.com/dlockgo/dlock/locktest"
)

// TestSameProcess: flocks belong to open file descriptions, so two Drivers
// of one process — and two acquisitions through one Driver — exclude each
// other.
func TestSameProcess(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	a, da := newLocker(t, dir)
	b, _ := newLocker(t, dir)
	lease := mustTry(t, ctx, a, "x")
	if _, err := b.TryAcquire(ctx, "x"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("another Driver: TryAcquire = %v, want ErrNotAcquired", err)
	}
	if held, ok := errors.AsType[*dlock.HeldError](func() error { _, err := b.TryAcquire(ctx, "x"); return err }()); !ok || held.Name != "x" {
		t.Errorf("the error is not a *HeldError naming the lock")
	}
	if _, err := a.TryAcquire(ctx, "x"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("the same Driver: TryAcquire = %v, want ErrNotAcquired", err)
	}
	r := driver.Request{Name: "x", Owner: "0123456789abcdef0123456789abcdef", TTL: time.Second}
	if _, err := da.TryLock(ctx, r); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("the same Driver, another owner: TryLock = %v, want ErrNotAcquired", err)
	}
	if da.Held() != 1 {
		t.Errorf("driver holds %d locks, want 1", da.Held())
	}

	// A waiter in the same process is woken by the release at once.
	got := make(chan *dlock.Lease)
	go func() {
		l, err := b.Acquire(ctx, "x")
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	if !settle(5*time.Second, func() bool { return filelock.Waiters() == 1 }) {
		t.Fatal("the waiter never registered")
	}
	released := time.Now()
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l := <-got
	t.Logf("in-process handoff took %v", time.Since(released))
	if l.Token() <= lease.Token() {
		t.Errorf("token %d after %d", l.Token(), lease.Token())
	}
	_ = l.Release(ctx)
}

// TestCancelWhileWaiting: a cancelled wait returns promptly and leaves no
// lock, no waiter, no descriptor and no goroutine behind. The backstop is
// 30 s, so that a wait returning within 5 s was ended by its context, not
// by a retry on the timer.
func TestCancelWhileWaiting(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	defer filelock.SetBackstop(30 * time.Second)()
	a, _ := newLocker(t, dir)
	b, db := newLocker(t, dir)
	c, _ := newLocker(t, dir)
	lease := mustTry(t, ctx, a, "x")

	// Warm up: the first wait starts the process's watcher, which stays
	// while b is open; count resources after that.
	wctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	_, _ = b.Acquire(wctx, "x")
	cancel()
	fds, goroutines := openFDs(), runtime.NumGoroutine()

	for i, stop := range []func(context.CancelFunc){
		func(cancel context.CancelFunc) { time.AfterFunc(100*time.Millisecond, cancel) },
		nil, // a deadline
	} {
		wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		if stop != nil {
			wctx, cancel = context.WithCancel(ctx)
			stop(cancel)
		}
		start := time.Now()
		l, err := b.Acquire(wctx, "x")
		took := time.Since(start)
		cancel()
		if err == nil {
			_ = l.Release(ctx)
			t.Fatalf("case %d: Acquire succeeded while the lock was held", i)
		}
		if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("case %d: Acquire = %v, want the context's error", i, err)
		}
		if took > 5*time.Second {
			t.Errorf("case %d: Acquire returned %v after it started, 100ms after which it was cancelled: not by the context, with a backstop of 30 s", i, took)
		}
	}
	if n := filelock.Waiters(); n != 0 {
		t.Errorf("%d waiters still registered", n)
	}
	if db.Held() != 0 {
		t.Errorf("the cancelled driver holds %d locks", db.Held())
	}
	if got := openFDs(); got != fds {
		t.Errorf("%d descriptors open after the cancelled waits, %d before", got, fds)
	}
	locktest.NoLeak(t, goroutines)
	// Nothing stays queued: right after the release, a third client gets
	// the lock on its first try.
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	_ = mustTry(t, ctx, c, "x").Release(ctx)
}

// TestCloseEndsWaits: closing a Driver ends its waits with ErrClosed and
// releases its locks.
func TestCloseEndsWaits(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	a, _ := newLocker(t, dir)
	d, err := filelock.NewDriver(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	lease := mustTry(t, ctx, a, "x")
	r := driver.Request{Name: "x", Owner: "0123456789abcdef0123456789abcdef", TTL: time.Second}
	errc := make(chan error)
	go func() {
		_, err := d.Lock(ctx, r)
		errc <- err
	}()
	if !settle(5*time.Second, func() bool { return filelock.Waiters() == 1 }) {
		t.Fatal("the waiter never registered")
	}
	_ = d.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, dlock.ErrClosed) {
			t.Errorf("Lock after Close = %v, want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end the wait")
	}
	if _, err := d.TryLock(ctx, r); !errors.Is(err, dlock.ErrClosed) {
		t.Errorf("TryLock after Close = %v, want ErrClosed", err)
	}
	if err := d.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
	_ = lease.Release(ctx)

	// Close releases what the driver holds.
	d, _ = filelock.NewDriver(dir, nil)
	if _, err := d.TryLock(ctx, r); err != nil {
		t.Fatal(err)
	}
	_ = d.Close()
	_ = mustTry(t, ctx, a, "x").Release(ctx)
}

// TestNoGoroutineLeak: once every Locker is closed, the process's watcher
// and its goroutine are gone, and so are the lease supervisors.
func TestNoGoroutineLeak(t *testing.T) {
	ctx := context.Background()
	if !settle(5*time.Second, func() bool { return !filelock.WatcherActive() }) {
		t.Fatal("the watcher of earlier tests still runs")
	}
	before := runtime.NumGoroutine()
	dir := t.TempDir()
	var lockers []*dlock.Locker
	for range 4 {
		l, err := filelock.New(dir, nil)
		if err != nil {
			t.Fatal(err)
		}
		lockers = append(lockers, l)
	}
	done := make(chan struct{})
	for i, l := range lockers {
		go func() {
			defer func() { done <- struct{}{} }()
			for range 20 {
				lease, err := l.Acquire(ctx, "x")
				if err != nil {
					t.Error(err)
					return
				}
				_ = lease.Release(ctx)
			}
			if i == 0 { // one lease left for Close to release
				if _, err := l.Acquire(ctx, "y"); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	for range lockers {
		<-done
	}
	for _, l := range lockers {
		_ = l.Close()
	}
	if filelock.WatcherActive() {
		t.Error("the watcher still runs after every Locker closed")
	}
	locktest.NoLeak(t, before)
}

// TestNoStarvationInProcess: a client of this process that releases a lock
// and at once asks for it again does not overtake a waiter of its process
// that has waited more than a moment (starveAfter, 1 ms): the waiter gets
// the lock first, and the client only after the waiter's release. Without
// that step back the client, which needs no wake-up, would win nearly
// every such race against the waiter its release woke, and could keep it
// out for ever. The waits here are woken by releases only: no kernel
// watcher, and a backstop of 30 s, so that no retry on a timer can explain
// a grant within the 5 s bounds (a hand-over takes microseconds).
func TestNoStarvationInProcess(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	restoreEvents := filelock.SetNoEvents()
	restoreBackstop := filelock.SetBackstop(30 * time.Second)
	var wg sync.WaitGroup
	t.Cleanup(func() { // after the lockers' Close ended the waits
		wg.Wait()
		restoreBackstop()
		restoreEvents()
	})
	client, _ := newLocker(t, dir)
	waiter, _ := newLocker(t, dir)
	acquire := func(l *dlock.Locker) <-chan *dlock.Lease {
		got := make(chan *dlock.Lease, 1)
		wg.Go(func() {
			lease, err := l.Acquire(ctx, "x")
			if err != nil && !errors.Is(err, dlock.ErrClosed) {
				t.Error(err)
			}
			got <- lease
		})
		return got
	}
	for round := range 3 {
		lease := mustTry(t, ctx, client, "x")
		waiterGot := acquire(waiter)
		if !settle(5*time.Second, func() bool { return filelock.Waiters() == 1 }) {
			t.Fatal("the waiter never registered")
		}
		time.Sleep(5 * time.Millisecond) // the waiter has now waited more than starveAfter
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
		clientGot := acquire(client)
		var wl *dlock.Lease
		select {
		case wl = <-waiterGot:
		case cl := <-clientGot:
			_ = cl.Release(ctx)
			t.Fatalf("round %d: the client that released took the lock again before the waiter its release woke", round)
		case <-time.After(5 * time.Second):
			t.Fatalf("round %d: the waiter did not get the lock within 5 s of the release", round)
		}
		if wl == nil {
			t.FailNow()
		}
		// The client waits for a wake-up, and nothing but the waiter's
		// release can give it one now.
		if !settle(5*time.Second, func() bool { return filelock.Waiters() == 1 }) {
			t.Fatalf("round %d: the client is not waiting", round)
		}
		select {
		case cl := <-clientGot:
			_ = cl.Release(ctx)
			t.Fatalf("round %d: the client got the lock while the waiter held it", round)
		default:
		}
		if err := wl.Release(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case cl := <-clientGot:
			if cl == nil {
				t.FailNow()
			}
			if cl.Token() <= wl.Token() {
				t.Errorf("round %d: the client's token %d after the waiter's %d", round, cl.Token(), wl.Token())
			}
			_ = cl.Release(ctx)
		case <-time.After(5 * time.Second):
			t.Fatalf("round %d: the client did not get the lock within 5 s of the waiter's release", round)
		}
	}
}

// TestContendedEveryClientServed: 8 clients of one process release and at
// once acquire again, in tight loops, and keep at it until every one of
// them has had the lock 50 times. The bound, 60 s, only ends a wait that
// would otherwise hang; the loops take well under a second. How often the
// lock changes hands is a figure, not a property: BenchmarkContended
// reports it as handoffs/op.
func TestContendedEveryClientServed(t *testing.T) {
	const (
		clients = 8
		want    = 50
		bound   = 60 * time.Second
	)
	ctx := context.Background()
	dir := t.TempDir()
	var (
		counts  [clients]int
		short   = clients // clients with fewer than want acquisitions
		total   int
		mu      sync.Mutex
		wg      sync.WaitGroup
		stopped = make(chan struct{})
	)
	timer := time.AfterFunc(bound, func() { close(stopped) })
	defer timer.Stop()
	for i := range clients {
		l, _ := newLocker(t, dir)
		wg.Go(func() {
			for {
				select {
				case <-stopped:
					return
				default:
				}
				lease, err := l.Acquire(ctx, "x")
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				counts[i]++
				total++
				if counts[i] == want {
					short--
				}
				done := short == 0
				mu.Unlock()
				_ = lease.Release(ctx)
				if done {
					return
				}
			}
		})
	}
	wg.Wait()
	t.Logf("acquisitions per client: %v (%d in all)", counts, total)
	for i, n := range counts {
		if n < want {
			t.Errorf("client %d got the lock %d times in %v, among %d acquisitions: starved", i, n, bound, total)
		}
	}
}
