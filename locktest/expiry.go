package locktest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlockgo/dlock"
)

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
// before the other client acquires, not after: its Err, which decides at
// the call, says lost by then; Done, which the lease's timer closes for
// waking, closes at the latest a moment later (a timer can fire late on a
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
	other, err := b.Acquire(ctx, name)
	if err != nil {
		t.Fatalf("Acquire after the holder stopped renewing: %v", err)
	}
	gotAt := time.Now()
	lostErr := lease.Err()
	defer release(t, ctx, other)
	if !errors.Is(lostErr, dlock.ErrLost) {
		t.Errorf("Err() of the holder when another client acquired the lock = %v; the holder must learn of the loss first", lostErr)
	}
	select {
	case <-lease.Done():
	case <-time.After(prompt):
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

// lostWhenTakenAway: when the store loses the lock, the holder's Done
// closes (lossBound only bounds a hang; the time it took is logged), Err matches ErrLost, and a context from
// Lease.Context is cancelled with that cause.
func (s *suite) lostWhenTakenAway(t *testing.T, ctx context.Context, name string) {
	a := s.locker(t)
	lease := acquire(t, ctx, a, name)
	work, cancel := lease.Context(ctx)
	defer cancel()
	s.h.TakeAway(t, name)
	taken := time.Now()
	if !waitDone(lease, s.lossBound()) {
		t.Fatalf("Done() not closed %v after the lock was taken away (TTL %v)", time.Since(taken), s.h.TTL)
	}
	// The window docs/GUARANTEES.md reports: the store freed the lock at
	// taken; the holder's Done closed this much later.
	t.Logf("Done closed %v after the lock was taken away on the store (TTL %v)", time.Since(taken), s.h.TTL)
	if !errors.Is(lease.Err(), dlock.ErrLost) {
		t.Errorf("Err() after the lock was taken away = %v, want ErrLost", lease.Err())
	}
	mustCancelLost(t, work, "the lease's")
	if err := lease.Release(ctx); !errors.Is(err, dlock.ErrNotHeld) || !errors.Is(err, dlock.ErrLost) {
		t.Errorf("Release after loss = %v, want an error matching ErrNotHeld and ErrLost", err)
	}
}

// mustCancelLost checks that work, whose's Context, is cancelled promptly
// after the loss, with a cause matching ErrLost.
func mustCancelLost(t *testing.T, work context.Context, whose string) {
	t.Helper()
	select {
	case <-work.Done():
		if !errors.Is(context.Cause(work), dlock.ErrLost) {
			t.Errorf("context.Cause of %s context = %v, want ErrLost", whose, context.Cause(work))
		}
	case <-time.After(prompt):
		t.Errorf("%s context was not cancelled after the loss", whose)
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
	other, err := b.Acquire(ctx, name)
	if err != nil {
		t.Fatalf("Acquire after the holder crashed: %v", err)
	}
	t.Logf("another client acquired %v after the holder crashed", time.Since(crashed))
	if other.Token() <= lease.Token() {
		t.Errorf("the new holder's token %d is not greater than the crashed holder's %d", other.Token(), lease.Token())
	}
	release(t, ctx, other)
	if !waitDone(lease, s.lossBound()) {
		t.Error("the crashed holder's Done() never closed")
	}
}
