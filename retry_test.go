package dlock_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/memlock"
)

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
