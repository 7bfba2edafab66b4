package dlock_test

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/memlock"
)

// spinUntil busy-waits, without blocking or yielding, until t has passed:
// with GOMAXPROCS 1 the lease's timer cannot run meanwhile (barring an
// asynchronous preemption, which the callers detect), as for a process
// that was paused and has just been resumed.
func spinUntil(t time.Time) {
	for time.Now().Before(t) {
	}
}

// Err reports a lease lost at the first call after its validity ended,
// even when the lease's timer has not run yet; so does its context.
func TestErrChecksValidityAtTheCall(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	ctx := context.Background()
	l := newMem(t, memlock.NewStore())
	const ttl = 20 * time.Millisecond
	margin := max(time.Millisecond, ttl/100)
	var decided, raced int
	for i := 0; decided < 20 && i < 1000; i++ {
		// A name per run: the last run's lock may still be on the store
		// for a moment (the store's TTL outlasts the lease's validity,
		// and the lease's unlock after the loss runs on a goroutine).
		lease, err := l.TryAcquire(ctx, "job-"+strconv.Itoa(i), dlock.WithTTL(ttl), dlock.WithAutoRenew(false))
		if err != nil {
			t.Fatal(err)
		}
		work, cancel := lease.Context(ctx)
		spinUntil(lease.Expires().Add(-margin))
		select {
		case <-lease.Done():
			raced++ // preempted: the timer got there first; proves nothing
		default:
			decided++
			if err := work.Err(); !errors.Is(err, context.Canceled) {
				t.Errorf("run %d: the lease context's first Err after the validity = %v, want context.Canceled", i, err)
			}
			if err := lease.Err(); !errors.Is(err, dlock.ErrLost) {
				t.Errorf("run %d: Err after the validity = %v, want ErrLost", i, err)
			}
			if cause := context.Cause(work); !errors.Is(cause, dlock.ErrLost) {
				t.Errorf("run %d: context.Cause = %v, want ErrLost", i, cause)
			}
			select {
			case <-lease.Done():
			default:
				t.Errorf("run %d: Done still open after Err reported the loss", i)
			}
		}
		cancel()
		runtime.Gosched()
	}
	if decided < 10 { // a loaded machine's preemptions may let the timer win many runs
		t.Fatalf("only %d of %d runs reached Err before the lease's timer", decided, decided+raced)
	}
	t.Logf("%d runs decided at the call, %d won by the timer", decided, raced)
}

// checking wraps a memlock driver: its grants carry a Check that fails
// once gone is set, as a backend's does when it sees its session's validity
// end or its connection closed.
type checking struct {
	*memlock.Driver
	gone atomic.Bool
}

var errConnClosed = errors.New("the server closed the connection")

func (c *checking) TryLock(ctx context.Context, r driver.Request) (driver.Grant, error) {
	g, err := c.Driver.TryLock(ctx, r)
	g.Expires = time.Time{} // a session lock: no TTL of its own
	g.Check = func(time.Time) error {
		if c.gone.Load() {
			return errConnClosed
		}
		return nil
	}
	return g, err
}

// Err asks the driver's Grant.Check: the first call after the driver
// knows the lock gone reports the loss with the driver's reason, closes
// Done, and counts the loss under the reason "backend".
func TestErrAsksTheDriver(t *testing.T) {
	ctx := context.Background()
	d := &checking{Driver: memlock.NewStore().Driver()}
	l := newLocker(t, d)
	lease, err := l.TryAcquire(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	if err := lease.Err(); err != nil {
		t.Fatalf("Err while held = %v", err)
	}
	d.gone.Store(true)
	err = lease.Err()
	if !errors.Is(err, dlock.ErrLost) || !errors.Is(err, errConnClosed) {
		t.Fatalf("Err after the driver's check failed = %v, want ErrLost wrapping the driver's reason", err)
	}
	select {
	case <-lease.Done():
	default:
		t.Fatal("Done still open after Err reported the loss")
	}
	if err := lease.Release(ctx); !errors.Is(err, dlock.ErrNotHeld) || !errors.Is(err, dlock.ErrLost) {
		t.Errorf("Release after the loss = %v, want ErrNotHeld and ErrLost", err)
	}
}

// Err allocates nothing while the lease is held, with or without a
// driver's Check.
func TestErrDoesNotAllocate(t *testing.T) {
	ctx := context.Background()
	for _, d := range []driver.Driver{memlock.NewStore().Driver(), &checking{Driver: memlock.NewStore().Driver()}} {
		l, err := dlock.New(d)
		if err != nil {
			t.Fatal(err)
		}
		lease, err := l.TryAcquire(ctx, "job")
		if err != nil {
			t.Fatal(err)
		}
		if n := testing.AllocsPerRun(1000, func() { _ = lease.Err() }); n != 0 {
			t.Errorf("%T: Err allocates %v times per call, want 0", d, n)
		}
		l.Close()
	}
}

// Release of a lease whose validity ended before its timer ran reports
// the loss (and returns: the look that ends the lease must not wait for
// Release's own lock).
func TestReleaseAfterUnnoticedExpiry(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	ctx := context.Background()
	l := newMem(t, memlock.NewStore())
	const ttl = 20 * time.Millisecond
	decided := 0
	for i := 0; decided < 5 && i < 500; i++ {
		lease, err := l.TryAcquire(ctx, "job-"+strconv.Itoa(i), dlock.WithTTL(ttl), dlock.WithAutoRenew(false))
		if err != nil {
			t.Fatal(err)
		}
		spinUntil(lease.Expires().Add(-max(time.Millisecond, ttl/100)))
		select {
		case <-lease.Done():
			continue // the timer got there first
		default:
		}
		decided++
		// Called right here, before the timer can run; a Release that
		// deadlocks takes the test binary down.
		watchdog := time.AfterFunc(5*time.Second, func() { panic("Release after the validity ended did not return") })
		err = lease.Release(ctx)
		watchdog.Stop()
		if !errors.Is(err, dlock.ErrNotHeld) || !errors.Is(err, dlock.ErrLost) {
			t.Errorf("Release after the validity ended = %v, want ErrNotHeld and ErrLost", err)
		}
	}
	if decided < 5 {
		t.Fatalf("only %d runs reached Release before the lease's timer", decided)
	}
}

// A lease on a TTL backend costs no goroutine of its own while held: its
// supervision is a timer.
func TestTTLLeaseHasNoGoroutine(t *testing.T) {
	ctx := context.Background()
	l := newMem(t, memlock.NewStore())
	before := runtime.NumGoroutine()
	var leases []*dlock.Lease
	for i := range 100 {
		lease, err := l.TryAcquire(ctx, "held-"+strconv.Itoa(i), dlock.WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		_ = lease.Err()
		leases = append(leases, lease)
	}
	if n := runtime.NumGoroutine() - before; n > 5 {
		t.Errorf("100 held leases run %d more goroutines, want none of their own", n)
	}
	for _, lease := range leases {
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// flaky wraps a memlock driver; its Renew can be made to fail.
type flaky struct {
	*memlock.Driver
	failRenew atomic.Bool
	renews    atomic.Int32
}

func (f *flaky) Renew(ctx context.Context, r driver.Request) (time.Time, error) {
	f.renews.Add(1)
	if f.failRenew.Load() {
		return time.Time{}, errors.New("network down")
	}
	return f.Driver.Renew(ctx, r)
}

func TestRenewalFailureIsReportedBeforeExpiry(t *testing.T) {
	store := memlock.NewStore()
	d := &flaky{Driver: store.Driver()}
	l := newLocker(t, d, dlock.WithTTL(300*time.Millisecond))
	lease := mustAcquire(t, l, "job")
	time.Sleep(250 * time.Millisecond) // some renewals succeed
	if lease.Err() != nil {
		t.Fatalf("lease ended while renewals succeed: %v", lease.Err())
	}
	d.failRenew.Store(true)
	failedFrom := time.Now()
	if !lostAtExpiry(t, lease, "while renewals fail") {
		t.FailNow()
	}
	if !errors.Is(lease.Err(), dlock.ErrLost) || !strings.Contains(lease.Err().Error(), "network down") {
		t.Errorf("Err() = %v, want ErrLost with the renewal's cause", lease.Err())
	}
	if d.renews.Load() < 3 {
		t.Errorf("only %d renew attempts; failed renewals should be retried", d.renews.Load())
	}
	t.Logf("lost %v after renewals started failing", time.Since(failedFrom))
}

func TestNoRenewalAfterRelease(t *testing.T) {
	ctx := context.Background()
	d := &flaky{Driver: memlock.NewStore().Driver()}
	l := newLocker(t, d, dlock.WithTTL(30*time.Millisecond))
	for range 50 {
		lease := mustAcquire(t, l, "job")
		time.Sleep(time.Duration(runtime.NumGoroutine()%3) * 5 * time.Millisecond)
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
		n := d.renews.Load()
		time.Sleep(25 * time.Millisecond)
		if m := d.renews.Load(); m != n {
			t.Fatalf("%d renewals ran after Release returned", m-n)
		}
	}
}

// hanging wraps a memlock driver; once stuck is closed, its Renew
// blocks until unblock is closed, whatever its context says, as a client
// stuck on a silent connection does.
type hanging struct {
	*memlock.Driver
	stuck   chan struct{} // closed: renews hang
	unblock chan struct{} // closed: hanging renews return
	unlocks chan driver.Request
}

func (h *hanging) Renew(ctx context.Context, r driver.Request) (time.Time, error) {
	select {
	case <-h.stuck:
		<-h.unblock
		return time.Time{}, errors.New("connection reset")
	default:
		return h.Driver.Renew(ctx, r)
	}
}

func (h *hanging) Unlock(ctx context.Context, r driver.Request) error {
	select {
	case h.unlocks <- r:
	default:
	}
	return h.Driver.Unlock(ctx, r)
}

// lostAtExpiry sleeps until the lease's Expires and checks that it ends
// lost there, when (why) no renewal succeeds: Err says so at the call,
// however late this goroutine or the lease's timer runs, and Done closes.
// It reports whether Done closed.
func lostAtExpiry(t *testing.T, lease *dlock.Lease, why string) bool {
	t.Helper()
	time.Sleep(time.Until(lease.Expires()))
	if !errors.Is(lease.Err(), dlock.ErrLost) {
		t.Errorf("Err() at the end of the lock's validity, %s = %v, want ErrLost", why, lease.Err())
	}
	select {
	case <-lease.Done():
		return true
	case <-time.After(5 * time.Second):
		t.Errorf("lease not reported lost %s", why)
		return false
	}
}

// A renewal that hangs past the lock's validity, ignoring its context,
// does not delay the loss signal: Err says lost at the validity's end, Done
// closes while the renewal still hangs (it returns only after), and the
// lock is unlocked once the renewal returns.
func TestHungRenewalDoesNotDelayLoss(t *testing.T) {
	d := &hanging{Driver: memlock.NewStore().Driver(), stuck: make(chan struct{}), unblock: make(chan struct{}), unlocks: make(chan driver.Request, 1)}
	l := newLocker(t, d, dlock.WithTTL(300*time.Millisecond))
	lease := mustAcquire(t, l, "job")
	time.Sleep(150 * time.Millisecond) // a renewal succeeds
	close(d.stuck)
	if !lostAtExpiry(t, lease, "while its renewal hangs") {
		close(d.unblock)
		t.FailNow()
	}
	if !errors.Is(lease.Err(), dlock.ErrLost) {
		t.Errorf("Err() = %v, want ErrLost", lease.Err())
	}
	close(d.unblock)
	select {
	case r := <-d.unlocks:
		if r.Owner != lease.Owner() {
			t.Errorf("unlocked owner %q, want the lease's %q", r.Owner, lease.Owner())
		}
	case <-time.After(2 * time.Second):
		t.Error("no unlock after the hung renewal returned")
	}
}

func TestLeaseContext(t *testing.T) {
	ctx := context.Background()
	l := newMem(t, memlock.NewStore())
	lease := mustAcquire(t, l, "job")
	work, cancel := lease.Context(ctx)
	defer cancel()
	if work.Err() != nil {
		t.Fatal("the lease's context is done while the lease is held")
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	<-work.Done()
	if !errors.Is(context.Cause(work), dlock.ErrReleased) {
		t.Errorf("Cause = %v, want ErrReleased", context.Cause(work))
	}
}

// notifying wraps a memlock driver; its grants carry a Grant.OnLost whose
// notice the test signals, as a backend does when its session ends.
type notifying struct {
	*memlock.Driver
	mu      sync.Mutex
	notices map[string]*driver.LossNotice
}

func (n *notifying) TryLock(ctx context.Context, r driver.Request) (driver.Grant, error) {
	g, err := n.Driver.TryLock(ctx, r)
	if err == nil {
		notice := &driver.LossNotice{}
		n.mu.Lock()
		n.notices[r.Name] = notice
		n.mu.Unlock()
		g.OnLost = notice.Set
	}
	return g, err
}

func (n *notifying) signal(name string) {
	n.mu.Lock()
	notice := n.notices[name]
	n.mu.Unlock()
	notice.Signal()
}

// A lease whose grant has an OnLost costs no goroutine while held, and
// ends as lost (Done, ErrLost, its context's cause) when the driver
// signals; a signal after the release is ignored.
func TestOnLost(t *testing.T) {
	ctx := context.Background()
	d := &notifying{Driver: memlock.NewStore().Driver(), notices: map[string]*driver.LossNotice{}}
	l := newLocker(t, d, dlock.WithTTL(time.Hour))
	const n = 500
	before := runtime.NumGoroutine()
	leases := make([]*dlock.Lease, n)
	var err error
	for i := range leases {
		if leases[i], err = l.TryAcquire(ctx, "job-"+strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
	}
	if grew := runtime.NumGoroutine() - before; grew > n/10 {
		t.Errorf("%d leases cost %d goroutines, want none per lease", n, grew)
	}
	work, cancel := leases[0].Context(ctx)
	defer cancel()
	d.signal("job-0")
	select {
	case <-leases[0].Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Done not closed after the driver signalled the loss")
	}
	if err := leases[0].Err(); !errors.Is(err, dlock.ErrLost) {
		t.Errorf("Err after the signal = %v, want ErrLost", err)
	}
	<-work.Done()
	if cause := context.Cause(work); !errors.Is(cause, dlock.ErrLost) {
		t.Errorf("context.Cause = %v, want ErrLost", cause)
	}
	if err := leases[1].Release(ctx); err != nil {
		t.Fatal(err)
	}
	d.signal("job-1")
	if err := leases[1].Err(); !errors.Is(err, dlock.ErrReleased) {
		t.Errorf("Err of a released lease signalled after = %v, want ErrReleased", err)
	}
	for _, lease := range leases[2:] {
		if err := lease.Err(); err != nil {
			t.Fatalf("%s: Err = %v while held", lease.Name(), err)
		}
	}
}

// A LossNotice calls dlock's function once, whether Signal comes before
// Set or after, and never twice.
func TestLossNotice(t *testing.T) {
	for _, signalFirst := range []bool{false, true} {
		var n driver.LossNotice
		calls := make(chan struct{}, 2)
		f := func() { calls <- struct{}{} }
		if signalFirst {
			n.Signal()
			n.Set(f)
		} else {
			n.Set(f)
			n.Signal()
		}
		n.Signal()
		select {
		case <-calls:
		case <-time.After(5 * time.Second):
			t.Fatalf("signal first %v: not called", signalFirst)
		}
		select {
		case <-calls:
			t.Errorf("signal first %v: called twice", signalFirst)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// sessionBound grants locks without an expiry, as the session-bound
// backends (ZooKeeper, PostgreSQL, MySQL, file) do.
type sessionBound struct{ *memlock.Driver }

func (s sessionBound) TryLock(ctx context.Context, r driver.Request) (driver.Grant, error) {
	g, err := s.Driver.TryLock(ctx, r)
	g.Expires = time.Time{}
	return g, err
}

// WithMaxHold ends a lease that renewal would keep for ever, on time, as
// lost with ErrMaxHold, and frees the lock on the store at once: for a
// lock with a TTL, and for one without (a session-bound backend's).
func TestMaxHold(t *testing.T) {
	ctx := context.Background()
	const ttl, maxHold = 90 * time.Millisecond, 400 * time.Millisecond
	for _, c := range []struct {
		name string
		drv  driver.Driver
		ttl  time.Duration
	}{
		{"ttl", memlock.NewStore().Driver(), ttl},
		// The store keeps this one for its TTL (30s) unless released.
		{"session", sessionBound{memlock.NewStore().Driver()}, dlock.DefaultTTL},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := newLocker(t, c.drv, dlock.WithTTL(c.ttl))
			other := newLocker(t, c.drv)
			start := time.Now()
			lease, err := l.Acquire(ctx, "job", dlock.WithMaxHold(maxHold))
			if err != nil {
				t.Fatal(err)
			}
			// Held (past several TTLs, by renewal) up to the cap.
			time.Sleep(maxHold / 2)
			if err := lease.Err(); err != nil {
				t.Fatalf("Err at half the max hold = %v", err)
			}
			if _, err := other.TryAcquire(ctx, "job"); !errors.Is(err, dlock.ErrNotAcquired) {
				t.Fatalf("another client at half the max hold: %v, want ErrNotAcquired", err)
			}
			select {
			case <-lease.Done():
			case <-time.After(5 * time.Second):
				t.Fatal("the lease outlived its max hold")
			}
			// Not before the cap (it counts from the grant, after start);
			// after it, the 5 s above only bound a hang, and ErrMaxHold says
			// the cap, not a TTL, ended the lease.
			held := time.Since(start)
			t.Logf("the lease ended %v after the call, max hold %v", held, maxHold)
			if held < maxHold {
				t.Errorf("the lease ended after %v, before its max hold %v", held, maxHold)
			}
			err = lease.Err()
			if !errors.Is(err, dlock.ErrLost) || !errors.Is(err, dlock.ErrMaxHold) {
				t.Errorf("Err = %v, want ErrLost and ErrMaxHold", err)
			}
			// The lock is freed on the store, not left to its TTL (for
			// "session", 30 s: far past this 5 s bound).
			deadline := time.Now().Add(5 * time.Second)
			for {
				o, err := other.TryAcquire(ctx, "job")
				if err == nil {
					_ = o.Release(ctx)
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("another client still cannot take the lock after the max hold: %v", err)
				}
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
}

// A negative WithMaxHold is an error naming it.
func TestMaxHoldNegative(t *testing.T) {
	l := newMem(t, memlock.NewStore())
	if _, err := l.TryAcquire(context.Background(), "x", dlock.WithMaxHold(-time.Second)); err == nil {
		t.Fatal("TryAcquire with a negative max hold succeeded")
	}
}

// slowUnlock is a memlock driver whose Unlock takes delay before it
// reaches the store, as a slow network would make it.
type slowUnlock struct {
	*memlock.Driver
	delay time.Duration
}

func (s slowUnlock) Unlock(ctx context.Context, r driver.Request) error {
	select {
	case <-time.After(s.delay):
	case <-ctx.Done():
		return ctx.Err()
	}
	return s.Driver.Unlock(ctx, r)
}

// Close waits for the unlock a lease started itself at its end (here its
// max hold, as for a validity that ran out): when Close returns, the lock is free
// on the store, although that unlock took 200 ms to get there. A Close
// that does not wait leaves the lock held for its TTL (a minute here),
// every time.
func TestCloseWaitsForUnlockAfterEnd(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name string
		opts []dlock.Option
	}{
		{"max hold", []dlock.Option{dlock.WithMaxHold(50 * time.Millisecond)}},
		{"max hold, ended by a look", []dlock.Option{dlock.WithMaxHold(time.Nanosecond)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			store := memlock.NewStore()
			l, err := dlock.New(slowUnlock{store.Driver(), 200 * time.Millisecond}, dlock.WithTTL(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			lease, err := l.Acquire(ctx, "job", c.opts...)
			if err != nil {
				t.Fatal(err)
			}
			select {
			case <-lease.Done():
			case <-time.After(10 * time.Second):
				t.Fatal("the lease did not end by itself")
			}
			if !errors.Is(lease.Err(), dlock.ErrLost) {
				t.Fatalf("Err = %v, want ErrLost", lease.Err())
			}
			if err := l.Close(); err != nil {
				t.Fatalf("Close = %v", err)
			}
			other := newLocker(t, store.Driver())
			next, err := other.TryAcquire(ctx, "job")
			if err != nil {
				t.Fatalf("TryAcquire right after Close = %v, want the lock free", err)
			}
			_ = next.Release(ctx)
		})
	}
}
