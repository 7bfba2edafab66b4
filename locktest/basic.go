package locktest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
)

func (s *suite) invalidName(t *testing.T, ctx context.Context, name string) {
	l := s.locker(t)
	bad := []string{"", "/a", "a/", "a//b", "../x", "a/../b", "a/./b", "a b", "a{b}", "a\x00b", "é", "a\nb",
		strings.Repeat("x", dlock.MaxNameLen+1)}
	for _, n := range bad {
		if lease, err := l.TryAcquire(ctx, n); !errors.Is(err, dlock.ErrInvalidName) {
			t.Errorf("TryAcquire(%q) = %v, want an error matching ErrInvalidName", n, err)
			if lease != nil {
				_ = lease.Release(ctx)
			}
		}
		if lease, err := l.Acquire(ctx, n); !errors.Is(err, dlock.ErrInvalidName) {
			t.Errorf("Acquire(%q) = %v, want an error matching ErrInvalidName", n, err)
			if lease != nil {
				_ = lease.Release(ctx)
			}
		}
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

// mustFollow checks that the acquisition, waiting behind prev, acquires
// once prev was released (at released), with a greater token, and
// releases it; it logs how long after the release. prev must have been
// taken with holdTTL, so that only its release can explain the grant
// within the property's time. who, after, prevWho and call name the
// parties in the messages.
func (w waiter) mustFollow(t *testing.T, ctx context.Context, prev *dlock.Lease, released time.Time, who, after, prevWho, call string) {
	t.Helper()
	select {
	case l := <-w.got:
		t.Logf("%s acquired %v after %s", who, time.Since(released), after)
		if l.Token() <= prev.Token() {
			t.Errorf("%s's token %d is not greater than the %s %d", who, l.Token(), prevWho, prev.Token())
		}
		release(t, ctx, l)
	case err := <-w.errc:
		t.Fatalf("%s: %v", call, err)
	case <-ctx.Done():
		t.Fatalf("%s never acquired after %s", who, after)
	}
}

func (s *suite) cancelDuringWait(t *testing.T, ctx context.Context, name string) {
	a, b, c := s.locker(t), s.locker(t), s.locker(t)
	lease := acquire(t, ctx, a, name)

	// A deadline during the wait.
	wctx, cancel := context.WithTimeout(ctx, s.h.TTL/2)
	start := time.Now()
	l, err := b.Acquire(wctx, name)
	cancel()
	took := time.Since(start)
	if err == nil {
		_ = l.Release(ctx)
		t.Fatal("Acquire succeeded while the lock was held")
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Acquire past its deadline = %v, want an error matching context.DeadlineExceeded", err)
	}
	if l != nil {
		t.Error("Acquire returned a lease with an error")
	}
	// Promptly: a hang bound, ten times the deadline at least.
	slack := max(prompt, 5*s.h.TTL)
	if took > s.h.TTL/2+slack {
		t.Errorf("Acquire returned %v after its %v deadline; want promptly, within %v", took-s.h.TTL/2, s.h.TTL/2, slack)
	}

	// A cancel during the wait.
	wctx, cancelc := context.WithCancel(ctx)
	time.AfterFunc(s.h.TTL/4, cancelc)
	start = time.Now()
	l, err = b.Acquire(wctx, name)
	if err == nil {
		_ = l.Release(ctx)
		t.Fatal("Acquire succeeded while the lock was held")
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Acquire cancelled = %v, want an error matching context.Canceled", err)
	}
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
	for _, try := range []bool{false, true} {
		acq := l.Acquire
		if try {
			acq = l.TryAcquire
		}
		lease, err := acq(done, name)
		if err == nil {
			_ = lease.Release(ctx)
			t.Errorf("acquire (try=%v) with a done context succeeded", try)
		} else if !errors.Is(err, context.Canceled) {
			t.Errorf("acquire (try=%v) with a done context = %v, want context.Canceled", try, err)
		}
	}
	mustBeFree(t, ctx, l, name, "after acquires with a done context")
}

func (s *suite) releaseByNonOwner(t *testing.T, ctx context.Context, name string) {
	a, b, c := s.locker(t), s.locker(t), s.locker(t)
	lease := acquire(t, ctx, a, name)

	// The driver itself refuses an unlock or refresh by another owner.
	other := driver.Request{Name: name, Owner: "0123456789abcdef0123456789abcdef", TTL: s.h.TTL}
	if err := b.Driver().Unlock(ctx, other); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("driver Unlock by a non-owner = %v, want an error matching ErrNotHeld", err)
	}
	if _, err := b.Driver().Refresh(ctx, other); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("driver Refresh by a non-owner = %v, want an error matching ErrNotHeld", err)
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
	if err := lease2.Refresh(ctx); err != nil {
		t.Errorf("new holder's Refresh after the stale Release: %v", err)
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
	if err := lease.Refresh(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Refresh after Release = %v, want an error matching ErrNotHeld", err)
	}
	mustBeHeld(t, ctx, a, name, "after a second Release by the old holder")
	release(t, ctx, lease2)
}
