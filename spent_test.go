package dlock_test

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/memlock"
)

// lateDriver is a memlock driver whose first grants (late of them) arrive
// with their validity already over, as after a request that outlasted the
// TTL while the store failed over.
type lateDriver struct {
	*memlock.Driver
	late atomic.Int32
}

func (d *lateDriver) spend(g driver.Grant, err error) (driver.Grant, error) {
	if err == nil && d.late.Add(-1) >= 0 {
		g.Expires = time.Now().Add(-time.Millisecond)
	}
	return g, err
}

func (d *lateDriver) TryLock(ctx context.Context, r driver.Request) (driver.Grant, error) {
	return d.spend(d.Driver.TryLock(ctx, r))
}

func (d *lateDriver) Lock(ctx context.Context, r driver.Request) (driver.Grant, error) {
	return d.spend(d.Driver.Lock(ctx, r))
}

// A grant that arrives spent is never handed to the caller as a lease:
// Acquire releases it and tries again, TryAcquire releases it and fails
// with ErrNotAcquired. Either way the lock is free for others at once.
func TestSpentGrantIsReleased(t *testing.T) {
	store := memlock.NewStore()
	d := &lateDriver{Driver: store.Driver()}
	l := newLocker(t, d, dlock.WithTTL(time.Second))
	other := newMem(t, store)
	ctx := context.Background()

	d.late.Store(2)
	lease, err := l.Acquire(ctx, "spent")
	if err != nil {
		t.Fatalf("Acquire after two spent grants: %v", err)
	}
	if err := lease.Err(); err != nil {
		t.Errorf("the lease Acquire returned is already lost: %v", err)
	}
	if n := d.late.Load(); n != -1 {
		t.Errorf("%d spent grants left, want every one tried past (late = -1)", n)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}

	d.late.Store(1)
	if _, err := l.TryAcquire(ctx, "spent"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryAcquire with a spent grant: %v, want ErrNotAcquired", err)
	}
	if !isFree(t, other, "spent") {
		t.Error("the spent grant was not released")
	}
}

// tryOnly is a memlock driver without its Lock: a driver that cannot
// wait, which the Locker tries again after its backoff while the lock is
// busy.
type tryOnly struct{ driver.Driver }

// Acquire on a driver that cannot wait tries again after each backoff,
// counting the attempts from 1, until the lock is free.
func TestAcquireRetriesAfterBackoff(t *testing.T) {
	ctx := context.Background()
	store := memlock.NewStore()
	held, err := newMem(t, store).Acquire(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	var attempts []int
	l, err := dlock.New(tryOnly{store.Driver()}, dlock.WithBackoff(func(attempt int) time.Duration {
		attempts = append(attempts, attempt)
		if attempt == 3 {
			if err := held.Release(ctx); err != nil {
				t.Error(err)
			}
		}
		return time.Millisecond
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	lease := mustAcquire(t, l, "job")
	if err := lease.Err(); err != nil {
		t.Errorf("the lease is not held: %v", err)
	}
	if want := []int{1, 2, 3}; !slices.Equal(attempts, want) {
		t.Errorf("backoff called for attempts %v, want %v", attempts, want)
	}
}

// The pause between tries never outlasts the holder's known expiry (its
// *HeldError), and ends with ctx.
func TestAcquireRetryPause(t *testing.T) {
	ctx := context.Background()
	store := memlock.NewStore()
	l := newLocker(t, tryOnly{store.Driver()}, dlock.WithBackoff(dlock.ConstantBackoff(time.Hour)))

	// A holder that does not renew: its lock is free after its TTL, long
	// before the backoff.
	if _, err := newMem(t, store, dlock.WithTTL(200*time.Millisecond), dlock.WithAutoRenew(false)).Acquire(ctx, "expiring"); err != nil {
		t.Fatal(err)
	}
	wait, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if _, err := l.Acquire(wait, "expiring"); err != nil {
		t.Errorf("Acquire of a lock that expires: %v; the pause went past the holder's expiry", err)
	}

	// A holder that renews: the wait ends with ctx.
	if _, err := newMem(t, store).Acquire(ctx, "renewed"); err != nil {
		t.Fatal(err)
	}
	wait, cancel = context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, err := l.Acquire(wait, "renewed"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Acquire until ctx ends: %v, want context.DeadlineExceeded", err)
	}
}
