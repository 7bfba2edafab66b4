package locktest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
)

// Mutex properties.

func (s *suite) invalidName(t *testing.T, ctx context.Context, name string) {
	l := s.locker(t)
	bad := []string{"", "/a", "a/", "a//b", "../x", "a/../b", "a/./b", "a b", "a{b}", "a\x00b", "é", "a\nb",
		strings.Repeat("x", dlock.MaxNameLen+1)}
	for _, n := range bad {
		mustFailWith(t, ctx, dlock.ErrInvalidName, func() (*dlock.Lease, error) { return l.TryAcquire(ctx, n) }, fmt.Sprintf("TryAcquire(%q)", n))
		mustFailWith(t, ctx, dlock.ErrInvalidName, func() (*dlock.Lease, error) { return l.Acquire(ctx, n) }, fmt.Sprintf("Acquire(%q)", n))
	}
	good := []string{name + "/a", name + "/orders/42", name + "/A.b-c_d:e@f+g=h",
		name + "/" + strings.Repeat("y", dlock.MaxNameLen-len(name)-1)}
	for _, n := range good {
		lease, err := tryDecided(ctx, l, n)
		if err != nil {
			t.Errorf("TryAcquire(%q) = %v, want success for a valid name", n, err)
			continue
		}
		release(t, ctx, lease)
	}
}

func (s *suite) tryWhileHeld(t *testing.T, ctx context.Context, name string) {
	a, b := s.locker(t), s.locker(t)
	lease := acquire(t, ctx, a, name)
	if lease.Name() != name {
		t.Errorf("Name() = %q, want %q", lease.Name(), name)
	}
	if lease.Err() != nil {
		t.Errorf("Err() of a held lease = %v, want nil", lease.Err())
	}
	mustBeHeld(t, ctx, b, name, "other client while held")
	mustBeHeld(t, ctx, a, name, "same client while held")
	if _, err := b.TryAcquire(ctx, name); err != nil {
		if held, ok := errors.AsType[*dlock.HeldError](err); ok && held.Name != name {
			t.Errorf("HeldError.Name = %q, want %q", held.Name, name)
		}
	}
	release(t, ctx, lease)
	mustBeFree(t, ctx, b, name, "after release")
}

func (s *suite) waitsForRelease(t *testing.T, ctx context.Context, name string) {
	a, b := s.locker(t, dlock.WithTTL(holdTTL)), s.locker(t)
	lease := acquire(t, ctx, a, name)
	w := startWaiter(func() (*dlock.Lease, error) { return b.Acquire(ctx, name) })
	w.mustWait(t, s.h.TTL/2, "Acquire returned while another client held the lock", "Acquire while held")
	released := time.Now()
	release(t, ctx, lease)
	w.mustFollow(t, ctx, lease, released, "the waiter", "the release", "previous holder's", "Acquire after release")
}

// waiter is an acquisition running in the background.
type waiter struct {
	got  chan *dlock.Lease
	errc chan error
}

// startWaiter runs acquire in the background.
func startWaiter(acquire func() (*dlock.Lease, error)) waiter {
	w := waiter{got: make(chan *dlock.Lease, 1), errc: make(chan error, 1)}
	go func() {
		l, err := acquire()
		if err != nil {
			w.errc <- err
			return
		}
		w.got <- l
	}()
	return w
}

// mustWait fails t if the acquisition ends within d: with the message
// returned when it acquired, or call and its error when it failed.
func (w waiter) mustWait(t *testing.T, d time.Duration, returned, call string) {
	t.Helper()
	select {
	case l := <-w.got:
		_ = l.Release(context.Background())
		t.Fatal(returned)
	case err := <-w.errc:
		t.Fatalf("%s: %v", call, err)
	case <-time.After(d):
	}
}

// mustFollow is next for an acquisition waiting behind prev, whose token
// it checks is greater than prev's before it releases it. prev must have
// been taken with holdTTL, so that only its release can explain the grant
// within the property's time.
func (w waiter) mustFollow(t *testing.T, ctx context.Context, prev *dlock.Lease, released time.Time, who, after, prevWho, call string) {
	t.Helper()
	l := w.next(t, ctx, released, who, after, call)
	if l.Token() <= prev.Token() {
		t.Errorf("%s's token %d is not greater than the %s %d", who, l.Token(), prevWho, prev.Token())
	}
	release(t, ctx, l)
}

// next returns the lease the acquisition gets after a release at
// released, and logs how long after; it fails t if the acquisition fails
// or ctx ends first.
func (w waiter) next(t *testing.T, ctx context.Context, released time.Time, who, after, call string) *dlock.Lease {
	t.Helper()
	select {
	case l := <-w.got:
		t.Logf("%s acquired %v after %s", who, time.Since(released), after)
		return l
	case err := <-w.errc:
		t.Fatalf("%s: %v", call, err)
	case <-ctx.Done():
		t.Fatalf("%s never acquired after %s", who, after)
	}
	return nil
}

func (s *suite) cancelDuringWait(t *testing.T, ctx context.Context, name string) {
	a, b, c := s.locker(t), s.locker(t), s.locker(t)
	lease := acquire(t, ctx, a, name)

	// A deadline during the wait, then a cancel, each of which must end
	// it promptly: a hang bound, ten times the deadline at least.
	slack := max(prompt, 5*s.h.TTL)
	start := time.Now()
	mustTimeOut(t, ctx, s.h.TTL/2, func(ctx context.Context) (*dlock.Lease, error) { return b.Acquire(ctx, name) }, "Acquire while held")
	if took := time.Since(start); took > s.h.TTL/2+slack {
		t.Errorf("Acquire returned %v after its %v deadline; want promptly, within %v", took-s.h.TTL/2, s.h.TTL/2, slack)
	}
	wctx, cancel := context.WithCancel(ctx)
	time.AfterFunc(s.h.TTL/4, cancel)
	start = time.Now()
	mustFailWith(t, ctx, context.Canceled, func() (*dlock.Lease, error) { return b.Acquire(wctx, name) }, "Acquire cancelled while held")
	if took := time.Since(start); took > s.h.TTL/4+slack {
		t.Errorf("Acquire returned %v after its cancel; want promptly, within %v", took-s.h.TTL/4, slack)
	}

	// The abandoned waits left nothing held or queued: once the holder
	// releases, a third client gets the lock at once.
	release(t, ctx, lease)
	mustBeFree(t, ctx, c, name, "after the cancelled waiters gave up and the holder released")
}

func (s *suite) doneContext(t *testing.T, ctx context.Context, name string) {
	l := s.locker(t)
	done, cancel := context.WithCancel(ctx)
	cancel()
	mustFailWith(t, ctx, context.Canceled, func() (*dlock.Lease, error) { return l.Acquire(done, name) }, "Acquire with a done context")
	mustFailWith(t, ctx, context.Canceled, func() (*dlock.Lease, error) { return l.TryAcquire(done, name) }, "TryAcquire with a done context")
	mustBeFree(t, ctx, l, name, "after acquires with a done context")
}

func (s *suite) releaseByNonOwner(t *testing.T, ctx context.Context, name string) {
	a, b, c := s.locker(t), s.locker(t), s.locker(t)
	lease := acquire(t, ctx, a, name)

	// The driver itself refuses an unlock or renew by another owner.
	other := driver.Request{Name: name, Owner: "0123456789abcdef0123456789abcdef", TTL: s.h.TTL}
	if err := b.Driver().Unlock(ctx, other); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("driver Unlock by a non-owner = %v, want an error matching ErrNotHeld", err)
	}
	if _, err := b.Driver().Renew(ctx, other); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("driver Renew by a non-owner = %v, want an error matching ErrNotHeld", err)
	}
	mustBeHeld(t, ctx, c, name, "after a non-owner's unlock")

	// A stale holder's Release does not free the new holder's lock.
	s.h.TakeAway(t, name)
	lease2 := acquire(t, ctx, b, name)
	err := lease.Release(ctx)
	if !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Release by a holder whose lock was taken away = %v, want an error matching ErrNotHeld", err)
	}
	if !errors.Is(lease.Err(), dlock.ErrLost) {
		t.Errorf("Err() of a lease whose lock was taken away = %v, want ErrLost", lease.Err())
	}
	mustBeHeld(t, ctx, c, name, "after the stale holder's Release")
	if err := lease2.Renew(ctx); err != nil {
		t.Errorf("new holder's Renew after the stale Release: %v", err)
	}
	release(t, ctx, lease2)
}

func (s *suite) doubleRelease(t *testing.T, ctx context.Context, name string) {
	a, b := s.locker(t), s.locker(t)
	lease := acquire(t, ctx, a, name)
	release(t, ctx, lease)
	select {
	case <-lease.Done():
	default:
		t.Error("Done() is not closed after Release")
	}
	if !errors.Is(lease.Err(), dlock.ErrReleased) {
		t.Errorf("Err() after Release = %v, want ErrReleased", lease.Err())
	}
	lease2 := acquire(t, ctx, b, name)
	err := lease.Release(ctx)
	if !errors.Is(err, dlock.ErrNotHeld) || !errors.Is(err, dlock.ErrReleased) {
		t.Errorf("second Release = %v, want an error matching ErrNotHeld and ErrReleased", err)
	}
	if err := lease.Renew(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Renew after Release = %v, want an error matching ErrNotHeld", err)
	}
	mustBeHeld(t, ctx, a, name, "after a second Release by the old holder")
	release(t, ctx, lease2)
}

// renewalKeepsLock holds a lock for several TTLs with automatic renewal;
// nobody else may get it meanwhile.
func (s *suite) renewalKeepsLock(t *testing.T, ctx context.Context, name string) {
	a, b := s.locker(t), s.locker(t)
	lease := acquire(t, ctx, a, name)
	end := time.Now().Add(3 * s.h.TTL)
	for time.Now().Before(end) {
		mustBeHeld(t, ctx, b, name, "while the holder renews")
		if err := lease.Err(); err != nil {
			t.Fatalf("lease ended while renewed: %v", err)
		}
		time.Sleep(s.h.TTL / 5)
	}
	release(t, ctx, lease)
}

// expiresWithoutRenewal: a holder that does not renew loses the lock after
// its TTL and another client gets it — and the holder learns of the loss
// first: its Err, deciding at the call, says lost by then; Done, closed by
// the lease's timer, at most a moment later (a timer can fire late on a
// starved machine).
func (s *suite) expiresWithoutRenewal(t *testing.T, ctx context.Context, name string) {
	a, b := s.locker(t), s.locker(t)
	if s.h.Crash != nil {
		s.crashedHolder(t, ctx, a, b, name)
		return
	}
	// The store counts the TTL from when it set the lock, during the
	// acquisition (a Redlock's nodes, in its first round): the lock can be
	// free a TTL after the call started, which a slow acquisition (TLS on
	// a loaded machine) brings well before a TTL after it returned.
	sent := time.Now()
	lease := acquire(t, ctx, a, name, dlock.WithAutoRenew(false))
	acquired := time.Now()
	other := mustAcquire(t, func() (*dlock.Lease, error) { return b.Acquire(ctx, name) }, "Acquire after the holder stopped renewing")
	gotAt := time.Now()
	lostErr := lease.Err()
	defer release(t, ctx, other)
	if !errors.Is(lostErr, dlock.ErrLost) {
		t.Errorf("Err() of the holder when another client acquired the lock = %v; the holder must learn of the loss first", lostErr)
	}
	if !closedWithin(lease.Done(), prompt) {
		t.Errorf("the holder's Done() not closed %v after another client acquired its expired lock", prompt)
	}
	if held := gotAt.Sub(sent); held < s.h.TTL*9/10 {
		t.Errorf("another client got the lock %v after it was asked for, before its TTL %v", held, s.h.TTL)
	}
	t.Logf("another client got the expired lock %v after it was taken (TTL %v)", gotAt.Sub(acquired), s.h.TTL)
	if held := gotAt.Sub(acquired); held > s.lossBound() {
		t.Errorf("another client got the expired lock only %v after it was taken (TTL %v)", held, s.h.TTL)
	}
	if !errors.Is(lease.Err(), dlock.ErrLost) {
		t.Errorf("Err() of an expired lease = %v, want ErrLost", lease.Err())
	}
	if other.Token() <= lease.Token() {
		t.Errorf("the new holder's token %d is not greater than the expired holder's %d", other.Token(), lease.Token())
	}
	if err := lease.Release(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Release of an expired lease = %v, want an error matching ErrNotHeld", err)
	}
}

// lostWhenTakenAway: a holder learns that the store lost its lock (mustSeeLoss).
func (s *suite) lostWhenTakenAway(t *testing.T, ctx context.Context, name string) {
	lease := acquire(t, ctx, s.locker(t), name)
	work, cancel := lease.Context(ctx)
	defer cancel()
	s.h.TakeAway(t, name)
	s.mustSeeLoss(t, ctx, lease, work, time.Now(), "the lease's")
}

// mustSeeLoss checks that x, a lease or a set, one of whose locks the
// store took away at taken, learns of the loss: its Done closes
// (lossBound only bounds a hang; the time it took is logged: the window
// docs/GUARANTEES.md reports), its Err matches ErrLost, work (from its
// Context) is cancelled promptly with that cause, and its Release matches
// ErrNotHeld and ErrLost. whose names x in the messages.
func (s *suite) mustSeeLoss(t *testing.T, ctx context.Context, x interface {
	Done() <-chan struct{}
	Err() error
	Release(context.Context) error
}, work context.Context, taken time.Time, whose string) {
	t.Helper()
	if !closedWithin(x.Done(), s.lossBound()) {
		_ = x.Release(ctx)
		t.Fatalf("%s Done() not closed %v after a lock was taken away (TTL %v)", whose, time.Since(taken), s.h.TTL)
	}
	t.Logf("%s Done closed %v after the lock was taken away on the store (TTL %v)", whose, time.Since(taken), s.h.TTL)
	if !errors.Is(x.Err(), dlock.ErrLost) {
		t.Errorf("%s Err() after a lock was taken away = %v, want ErrLost", whose, x.Err())
	}
	if !closedWithin(work.Done(), prompt) {
		t.Errorf("%s context was not cancelled after the loss", whose)
	} else if !errors.Is(context.Cause(work), dlock.ErrLost) {
		t.Errorf("context.Cause of %s context = %v, want ErrLost", whose, context.Cause(work))
	}
	if err := x.Release(ctx); !errors.Is(err, dlock.ErrNotHeld) || !errors.Is(err, dlock.ErrLost) {
		t.Errorf("%s Release after the loss = %v, want an error matching ErrNotHeld and ErrLost", whose, err)
	}
}

// crashedHolder is ExpiresWithoutRenewal for session-bound backends: the
// holder's client crashes; another client gets the lock once the store
// ends the session, and not before the harness's TTL-scale bound.
func (s *suite) crashedHolder(t *testing.T, ctx context.Context, a, b *dlock.Locker, name string) {
	lease := acquire(t, ctx, a, name)
	mustBeHeld(t, ctx, b, name, "before the holder crashed")
	s.h.Crash(t, a)
	crashed := time.Now()
	other := mustAcquire(t, func() (*dlock.Lease, error) { return b.Acquire(ctx, name) }, "Acquire after the holder crashed")
	t.Logf("another client acquired %v after the holder crashed", time.Since(crashed))
	if other.Token() <= lease.Token() {
		t.Errorf("the new holder's token %d is not greater than the crashed holder's %d", other.Token(), lease.Token())
	}
	release(t, ctx, other)
	if !closedWithin(lease.Done(), s.lossBound()) {
		t.Error("the crashed holder's Done() never closed")
	}
}

// Contenders and rounds of the MutualExclusion property.
const (
	contenders = 16
	rounds     = 25
)

// mutualExclusion runs 16 goroutines over 4 clients that take one lock
// many times; a holders gauge must never exceed 1, and the tokens, in the
// order the critical sections ran, must strictly increase.
func (s *suite) mutualExclusion(t *testing.T, ctx context.Context, name string) {
	lockers := s.lockers(t, 4)
	var (
		held   gauge
		mu     sync.Mutex
		tokens []uint64
		wg     sync.WaitGroup
		fail   firstError
	)
	for g := range contenders {
		wg.Go(func() {
			l := lockers[g%len(lockers)]
			for range rounds {
				lease, err := l.Acquire(ctx, name)
				if err != nil {
					fail.report(t, "Acquire under contention: %v", err)
					return
				}
				held.enter()
				mu.Lock()
				tokens = append(tokens, lease.Token())
				mu.Unlock()
				runtime.Gosched()
				held.leave()
				if err := lease.Release(ctx); err != nil {
					t.Errorf("Release under contention: %v", err)
				}
			}
		})
	}
	wg.Wait()
	if m := held.max.Load(); m > 1 {
		t.Errorf("holders gauge reached %d: mutual exclusion broken", m)
	}
	if want := contenders * rounds; len(tokens) != want && fail.count() == 0 {
		t.Errorf("%d critical sections ran, want %d", len(tokens), want)
	}
	checkIncreasing(t, tokens, "in critical-section order")
}

// tokensIncrease takes a lock many times in turn from three clients; the
// tokens must strictly increase.
func (s *suite) tokensIncrease(t *testing.T, ctx context.Context, name string) {
	lockers := s.lockers(t, 3)
	var tokens []uint64
	for i := range 60 {
		lease := TakeTurn(t, ctx, lockers, i, name)
		tokens = append(tokens, lease.Token())
		release(t, ctx, lease)
	}
	// A lock taken away and taken again still gets a greater token.
	lease := acquire(t, ctx, lockers[0], name)
	tokens = append(tokens, lease.Token())
	s.h.TakeAway(t, name)
	lease2 := acquire(t, ctx, lockers[1], name)
	tokens = append(tokens, lease2.Token())
	release(t, ctx, lease2)
	_ = lease.Release(ctx)
	checkIncreasing(t, tokens, "across successive acquisitions")
}

// heldLocks is how many locks heldNoGoroutine holds at once.
const heldLocks = 40

// heldNoGoroutine: holding a lock costs no goroutine of its own (a
// session's goroutines serve all its locks, a loss comes through
// Grant.OnLost, a renewal is a timer). With one lock held first (so that
// the client's own goroutines run), heldLocks more are taken with a long
// TTL, so that no renewal is in flight; the goroutine count must then
// settle, within prompt, below one per two held locks (a goroutine a grant
// starts for a moment, as a ZooKeeper holder's watch set after 25 ms, is
// allowed its moment).
func (s *suite) heldNoGoroutine(t *testing.T, ctx context.Context, name string) {
	l := s.locker(t)
	first := acquire(t, ctx, l, name+"/first", dlock.WithTTL(holdTTL))
	defer release(t, ctx, first)
	before := runtime.NumGoroutine()
	leases := make([]*dlock.Lease, 0, heldLocks)
	defer func() {
		for _, lease := range leases {
			release(t, ctx, lease)
		}
	}()
	for i := range heldLocks {
		leases = append(leases, acquire(t, ctx, l, fmt.Sprintf("%s/%d", name, i), dlock.WithTTL(holdTTL)))
	}
	grew := runtime.NumGoroutine() - before
	for deadline := time.Now().Add(prompt); grew >= heldLocks/2 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
		grew = runtime.NumGoroutine() - before
	}
	if grew >= heldLocks/2 {
		t.Errorf("%d more locks held took %d more goroutines, want fewer than one per two locks", heldLocks, grew)
	}
	t.Logf("%d more locks held: %+d goroutines", heldLocks, grew)
	for _, lease := range leases {
		if err := lease.Err(); err != nil {
			t.Errorf("%s: %v", lease.Name(), err)
		}
	}
}
