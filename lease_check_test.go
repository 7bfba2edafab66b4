package dlock_test

import (
	"context"
	"errors"
	"runtime"
	"strconv"
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

// BenchmarkLeaseErr measures the look a careful holder takes before each
// write: a clock read and a comparison.
func BenchmarkLeaseErr(b *testing.B) {
	ctx := context.Background()
	for _, bc := range []struct {
		name string
		d    driver.Driver
	}{{"ttl", memlock.NewStore().Driver()}, {"check", &checking{Driver: memlock.NewStore().Driver()}}} {
		b.Run(bc.name, func(b *testing.B) {
			l := newLocker(b, bc.d)
			lease, err := l.TryAcquire(ctx, "job")
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if lease.Err() != nil {
					b.Fatal("lost")
				}
			}
		})
	}
}

// BenchmarkLeaseContextErr measures the same look through Lease.Context.
func BenchmarkLeaseContextErr(b *testing.B) {
	ctx := context.Background()
	l := newMem(b, memlock.NewStore())
	lease, err := l.TryAcquire(ctx, "job")
	if err != nil {
		b.Fatal(err)
	}
	work, cancel := lease.Context(ctx)
	defer cancel()
	b.ReportAllocs()
	for b.Loop() {
		if work.Err() != nil {
			b.Fatal("lost")
		}
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
