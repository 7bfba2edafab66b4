package locktest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
)

// Semaphore properties, for backends that support driver.Permit.

// permits is the semaphore limit the suite uses.
const permits = 3

func (s *suite) noSemaphore(t *testing.T, ctx context.Context, l *dlock.Locker, name string) bool {
	return unsupported(t, ctx, l, driver.Permit, func() (*dlock.Lease, error) { return l.TryAcquirePermit(ctx, name, permits) })
}

// semaphoreLimit: 32 goroutines over 4 clients contend for 3 permits; a
// holders gauge must reach 3 and never exceed it, and every grant has a
// token of its own. The first holders wait (up to lossBound) until 3 hold
// at once, so that reaching 3 is the semaphore's doing.
func (s *suite) semaphoreLimit(t *testing.T, ctx context.Context, name string) {
	lockers := s.lockers(t, 4)
	if s.noSemaphore(t, ctx, lockers[0], name) {
		return
	}
	const goroutines, rounds = 32, 3
	var (
		g      gauge
		tokens tokenSet
		fail   firstError
		all    sync.WaitGroup
	)
	hold := min(s.h.TTL/50, 10*time.Millisecond)
	reached := make(chan struct{})
	var reachOnce sync.Once
	for i := range goroutines {
		l := lockers[i%len(lockers)]
		all.Go(func() {
			for range rounds {
				lease, err := l.AcquirePermit(ctx, name, permits)
				if err != nil {
					fail.report(t, "AcquirePermit under contention: %v", err)
					return
				}
				tokens.add(lease.Token())
				n := g.enter()
				if n > permits {
					fail.report(t, "%d holders of a semaphore with %d permits", n, permits)
				}
				if n >= permits {
					reachOnce.Do(func() { close(reached) })
				}
				select {
				case <-reached:
				case <-time.After(s.lossBound()):
				}
				time.Sleep(hold)
				g.leave()
				if err := lease.Release(ctx); err != nil {
					fail.report(t, "Release of a permit: %v", err)
				}
			}
		})
	}
	all.Wait()
	if m := g.max.Load(); m < permits && fail.count() == 0 {
		t.Errorf("the holders gauge peaked at %d with 32 contenders; want all %d permits used at once", m, permits)
	}
	tokens.check(t, "permit")
}

// semaphoreTryWhenFull: with every permit held, TryAcquirePermit fails;
// after one release it succeeds. The semaphore "x" is unrelated to the
// mutex "x".
func (s *suite) semaphoreTryWhenFull(t *testing.T, ctx context.Context, name string) {
	lockers := s.lockers(t, 4)
	if s.noSemaphore(t, ctx, lockers[0], name) {
		return
	}
	var held []*dlock.Lease
	for i := range permits {
		lease := mustAcquire(t, func() (*dlock.Lease, error) {
			return lockers[i].TryAcquirePermit(ctx, name, permits)
		}, "TryAcquirePermit with permits left")
		if lease.Mode() != driver.Permit {
			t.Errorf("Mode() of a permit = %v, want permit", lease.Mode())
		}
		held = append(held, lease)
	}
	mustFail(t, ctx, func() (*dlock.Lease, error) { return lockers[3].TryAcquirePermit(ctx, name, permits) },
		"TryAcquirePermit with every permit held")
	mustBeFree(t, ctx, lockers[3], name, "the mutex of the same name as a full semaphore")
	mustTimeOut(t, ctx, s.h.TTL/4, func(ctx context.Context) (*dlock.Lease, error) { return lockers[3].AcquirePermit(ctx, name, permits) },
		"AcquirePermit with every permit held")
	release(t, ctx, held[1])
	got := mustAcquire(t, func() (*dlock.Lease, error) { return lockers[3].TryAcquirePermit(ctx, name, permits) },
		"TryAcquirePermit after a holder released")
	mustFail(t, ctx, func() (*dlock.Lease, error) { return lockers[1].TryAcquirePermit(ctx, name, permits) },
		"TryAcquirePermit with every permit held again")
	release(t, ctx, got)
	release(t, ctx, held[0])
	release(t, ctx, held[2])
}

// semaphoreHolderStops: a permit holder that stops — crashes, or stops
// renewing — gives its permit back when the store notices, and a waiter
// gets it; the other holder keeps its permit.
func (s *suite) semaphoreHolderStops(t *testing.T, ctx context.Context, name string) {
	const limit = 2
	a, b, c := s.locker(t), s.locker(t), s.locker(t)
	if s.noSemaphore(t, ctx, a, name) {
		return
	}
	keep := mustAcquire(t, func() (*dlock.Lease, error) { return a.AcquirePermit(ctx, name, limit) }, "AcquirePermit")
	var opts []dlock.Option
	if s.h.Crash == nil {
		opts = append(opts, dlock.WithAutoRenew(false))
	}
	stopped := mustAcquire(t, func() (*dlock.Lease, error) { return c.AcquirePermit(ctx, name, limit, opts...) }, "AcquirePermit")
	taken := time.Now()
	if s.h.Crash != nil {
		s.h.Crash(t, c)
	}
	got := mustAcquire(t, func() (*dlock.Lease, error) { return b.AcquirePermit(ctx, name, limit) }, "AcquirePermit after a holder stopped")
	gotAt := time.Now()
	t.Logf("a waiter got the permit %v after its holder stopped", gotAt.Sub(taken))
	if s.h.Crash == nil {
		select {
		case <-stopped.Done():
		default:
			t.Error("a waiter got the permit before its holder's Done() closed; the holder must learn of the loss first")
		}
		if d := gotAt.Sub(taken); d < s.h.TTL*9/10 {
			t.Errorf("a waiter got the permit %v after it was taken, before its TTL %v", d, s.h.TTL)
		}
	}
	if d := gotAt.Sub(taken); d > s.lossBound() {
		t.Errorf("a waiter got the stopped holder's permit only %v later (TTL %v)", d, s.h.TTL)
	}
	if got.Token() <= stopped.Token() {
		t.Errorf("the new holder's token %d is not greater than the stopped holder's %d", got.Token(), stopped.Token())
	}
	if err := keep.Err(); err != nil {
		t.Errorf("the holder that kept renewing lost its permit: %v", err)
	}
	mustFail(t, ctx, func() (*dlock.Lease, error) { return b.TryAcquirePermit(ctx, name, limit) },
		"TryAcquirePermit with both permits held again")
	release(t, ctx, got)
	release(t, ctx, keep)
	if !closedWithin(stopped.Done(), s.h.TTL+5*time.Second) {
		t.Error("the stopped holder's Done() never closed")
	}
}
