package dlock_test

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/memlock"
)

// notifying wraps a memlock driver; its grants carry a Grant.OnLost whose
// notice the test signals, as a backend does when its session ends.
type notifying struct {
	*memlock.Driver
	mu      sync.Mutex
	notices map[string]*driver.LossNotice
}

func (n *notifying) TryLock(ctx context.Context, r driver.Request) (driver.Grant, error) {
	g, err := n.Driver.TryLock(ctx, r)
	if err == nil {
		notice := &driver.LossNotice{}
		n.mu.Lock()
		n.notices[r.Name] = notice
		n.mu.Unlock()
		g.OnLost = notice.Set
	}
	return g, err
}

func (n *notifying) signal(name string) {
	n.mu.Lock()
	notice := n.notices[name]
	n.mu.Unlock()
	notice.Signal()
}

// A lease whose grant has an OnLost costs no goroutine while held, and
// ends as lost (Done, ErrLost, its context's cause) when the driver
// signals; a signal after the release is ignored.
func TestOnLost(t *testing.T) {
	ctx := context.Background()
	d := &notifying{Driver: memlock.NewStore().Driver(), notices: map[string]*driver.LossNotice{}}
	l := newLocker(t, d, dlock.WithTTL(time.Hour))
	const n = 500
	before := runtime.NumGoroutine()
	leases := make([]*dlock.Lease, n)
	var err error
	for i := range leases {
		if leases[i], err = l.TryAcquire(ctx, "job-"+strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
	}
	if grew := runtime.NumGoroutine() - before; grew > n/10 {
		t.Errorf("%d leases cost %d goroutines, want none per lease", n, grew)
	}
	work, cancel := leases[0].Context(ctx)
	defer cancel()
	d.signal("job-0")
	select {
	case <-leases[0].Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Done not closed after the driver signalled the loss")
	}
	if err := leases[0].Err(); !errors.Is(err, dlock.ErrLost) {
		t.Errorf("Err after the signal = %v, want ErrLost", err)
	}
	<-work.Done()
	if cause := context.Cause(work); !errors.Is(cause, dlock.ErrLost) {
		t.Errorf("context.Cause = %v, want ErrLost", cause)
	}
	if err := leases[1].Release(ctx); err != nil {
		t.Fatal(err)
	}
	d.signal("job-1")
	if err := leases[1].Err(); !errors.Is(err, dlock.ErrReleased) {
		t.Errorf("Err of a released lease signalled after = %v, want ErrReleased", err)
	}
	for _, lease := range leases[2:] {
		if err := lease.Err(); err != nil {
			t.Fatalf("%s: Err = %v while held", lease.Name(), err)
		}
	}
}

// A LossNotice calls dlock's function once, whether Signal comes before
// Set or after, and never twice.
func TestLossNotice(t *testing.T) {
	for _, signalFirst := range []bool{false, true} {
		var n driver.LossNotice
		calls := make(chan struct{}, 2)
		f := func() { calls <- struct{}{} }
		if signalFirst {
			n.Signal()
			n.Set(f)
		} else {
			n.Set(f)
			n.Signal()
		}
		n.Signal()
		select {
		case <-calls:
		case <-time.After(5 * time.Second):
			t.Fatalf("signal first %v: not called", signalFirst)
		}
		select {
		case <-calls:
			t.Errorf("signal first %v: called twice", signalFirst)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
