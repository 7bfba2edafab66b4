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

// hanging wraps a memlock driver; once stuck is closed, its Refresh
// blocks until unblock is closed, whatever its context says, as a client
// stuck on a silent connection does.
type hanging struct {
	*memlock.Driver
	stuck   chan struct{} // closed: refreshes hang
	unblock chan struct{} // closed: hanging refreshes return
	unlocks chan driver.Request
}

func (h *hanging) Refresh(ctx context.Context, r driver.Request) (time.Time, error) {
	select {
	case <-h.stuck:
		<-h.unblock
		return time.Time{}, errors.New("connection reset")
	default:
		return h.Driver.Refresh(ctx, r)
	}
}

func (h *hanging) Unlock(ctx context.Context, r driver.Request) error {
	select {
	case h.unlocks <- r:
	default:
	}
	return h.Driver.Unlock(ctx, r)
}

// A renewal that hangs past the lock's validity, ignoring its context,
// does not delay the loss signal: Err says lost at the validity's end, Done
// closes while the renewal still hangs (it returns only after), and the
// lock is unlocked once the renewal returns.
func TestHungRenewalDoesNotDelayLoss(t *testing.T) {
	d := &hanging{Driver: memlock.NewStore().Driver(), stuck: make(chan struct{}), unblock: make(chan struct{}), unlocks: make(chan driver.Request, 1)}
	l := newLocker(t, d, dlock.WithTTL(300*time.Millisecond))
	lease := mustAcquire(t, l, "job")
	time.Sleep(150 * time.Millisecond) // a renewal succeeds
	close(d.stuck)
	exp := lease.Expires()
	time.Sleep(time.Until(exp))
	if !errors.Is(lease.Err(), dlock.ErrLost) {
		t.Errorf("Err() at the end of the lock's validity, its renewal hung = %v, want ErrLost", lease.Err())
	}
	select {
	case <-lease.Done():
	case <-time.After(5 * time.Second):
		close(d.unblock)
		t.Fatal("lease not reported lost while its renewal hangs")
	}
	if !errors.Is(lease.Err(), dlock.ErrLost) {
		t.Errorf("Err() = %v, want ErrLost", lease.Err())
	}
	close(d.unblock)
	select {
	case r := <-d.unlocks:
		if r.Owner != lease.Owner() {
			t.Errorf("unlocked owner %q, want the lease's %q", r.Owner, lease.Owner())
		}
	case <-time.After(2 * time.Second):
		t.Error("no unlock after the hung renewal returned")
	}
}
