package dlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/memlock"
)

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
