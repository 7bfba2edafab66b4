package dlock_test

import (
	"context"
	"errors"
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
