package locktest

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/dlockgo/dlock"
)

// Multi-lock properties. AcquireAll is built on the mutex, so every
// backend runs them.

// multiRounds is how many sets the opposite-order race takes in all.
const multiRounds = 1000

// multiOppositeOrders: two clients take the same two locks over and over,
// one asking for {a, b}, the other for {b, a}. Taken in one canonical
// order they never deadlock; a gauge per lock checks mutual exclusion.
func (s *suite) multiOppositeOrders(t *testing.T, ctx context.Context, name string) {
	x, y := name+"/a", name+"/b"
	orders := [][]string{{x, y}, {y, x}}
	lockers := s.lockers(t, 2)
	var (
		gx, gy gauge
		fail   firstError
		all    sync.WaitGroup
	)
	// One round takes a few round trips; a round that takes longer than
	// this is stuck, most likely in a deadlock.
	stuck := max(5*time.Second, 10*s.h.TTL)
	for i, l := range lockers {
		all.Go(func() {
			for range multiRounds / len(lockers) {
				rctx, cancel := context.WithTimeout(ctx, stuck)
				m, err := l.AcquireAll(rctx, orders[i])
				cancel()
				if err != nil {
					if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
						fail.report(t, "AcquireAll(%q) took more than %v, a deadlock: %v", orders[i], stuck, err)
					} else {
						fail.report(t, "AcquireAll(%q): %v", orders[i], err)
					}
					return
				}
				nx, ny := gx.enter(), gy.enter()
				if nx > 1 || ny > 1 {
					fail.report(t, "two sets held a lock at once (holders of %s: %d, of %s: %d)", x, nx, y, ny)
				}
				if tx, ty := m.Token(x), m.Token(y); tx == 0 || ty == 0 || tx != m.Lease(x).Token() {
					fail.report(t, "Token(%s) = %d, Token(%s) = %d; want the parts' non-zero tokens", x, tx, y, ty)
				}
				gx.leave()
				gy.leave()
				if err := m.Release(ctx); err != nil {
					fail.report(t, "Release of a set: %v", err)
				}
			}
		})
	}
	all.Wait()
	if fail.count() == 0 && (gx.max.Load() != 1 || gy.max.Load() != 1) {
		t.Errorf("holders gauges peaked at %d and %d, want 1", gx.max.Load(), gy.max.Load())
	}
}

// multiAllOrNothing: TryAcquireAll that finds one lock held, AcquireAll
// whose ctx ends while it waits, and a set with an invalid name all leave
// nothing held. A set is taken in sorted order, without duplicates.
func (s *suite) multiAllOrNothing(t *testing.T, ctx context.Context, name string) {
	a, b, c := s.locker(t), s.locker(t), s.locker(t)
	n1, n2, n3 := name+"/1", name+"/2", name+"/3"
	mid := acquire(t, ctx, c, n2)

	mustFailWith(t, ctx, dlock.ErrNotAcquired, func() (*dlock.MultiLease, error) {
		return decided(func() (*dlock.MultiLease, error) { return a.TryAcquireAll(ctx, []string{n3, n2, n1}) })
	}, "TryAcquireAll with a lock held")
	mustBeFree(t, ctx, b, n1, "after a failed TryAcquireAll")
	mustBeFree(t, ctx, b, n3, "after a failed TryAcquireAll")

	mustTimeOut(t, ctx, s.h.TTL/2, func(ctx context.Context) (*dlock.MultiLease, error) { return a.AcquireAll(ctx, []string{n3, n2, n1}) },
		"AcquireAll with a lock held")
	mustBeFree(t, ctx, b, n1, "after an AcquireAll that timed out")
	mustBeFree(t, ctx, b, n3, "after an AcquireAll that timed out")

	mustFailWith(t, ctx, dlock.ErrInvalidName, func() (*dlock.MultiLease, error) { return a.TryAcquireAll(ctx, []string{n1, "bad//name"}) },
		"TryAcquireAll with an invalid name")
	mustBeFree(t, ctx, b, n1, "after a TryAcquireAll with an invalid name")
	release(t, ctx, mid)

	m, err := a.TryAcquireAll(ctx, []string{n3, n1, n3, n2})
	if err != nil {
		t.Fatalf("TryAcquireAll of free locks: %v", err)
	}
	if got, want := m.Names(), []string{n1, n2, n3}; !slices.Equal(got, want) {
		t.Errorf("Names() = %q, want %q (sorted, without duplicates)", got, want)
	}
	if len(m.Leases()) != 3 {
		t.Errorf("Leases() has %d leases, want 3", len(m.Leases()))
	}
	for _, n := range []string{n1, n2, n3} {
		mustBeHeld(t, ctx, b, n, "while a set holds it")
	}
	if m.Err() != nil {
		t.Errorf("Err() of a held set = %v, want nil", m.Err())
	}
	if err := m.Release(ctx); err != nil {
		t.Errorf("Release of a set: %v", err)
	}
	if !errors.Is(m.Err(), dlock.ErrReleased) {
		t.Errorf("Err() after Release = %v, want ErrReleased", m.Err())
	}
	for _, n := range []string{n1, n2, n3} {
		mustBeFree(t, ctx, b, n, "after the set's Release")
	}
	if err := m.Release(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("second Release of a set = %v, want an error matching ErrNotHeld", err)
	}
}

// multiLostPart: when the store takes one lock of a set away, the set
// learns of it (mustSeeLoss), and Release frees the parts still held.
func (s *suite) multiLostPart(t *testing.T, ctx context.Context, name string) {
	a, b := s.locker(t), s.locker(t)
	p, q := name+"/p", name+"/q"
	m, err := a.AcquireAll(ctx, []string{q, p})
	if err != nil {
		t.Fatalf("AcquireAll: %v", err)
	}
	work, cancel := m.Context(ctx)
	defer cancel()
	s.h.TakeAway(t, q)
	s.mustSeeLoss(t, ctx, m, work, time.Now(), "the set's")
	mustBeFree(t, ctx, b, p, "after the Release of a set that lost another part")
	if !errors.Is(m.Err(), dlock.ErrLost) {
		t.Errorf("Err() after the Release of a set that lost a part = %v, want ErrLost still", m.Err())
	}
}
