package redlock

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock"
)

// attemptCounter is a go-redis hook that counts phase-1 script calls.
type attemptCounter struct{ n atomic.Int64 }

func (h *attemptCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *attemptCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.see(cmd)
		return next(ctx, cmd)
	}
}

func (h *attemptCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			h.see(cmd)
		}
		return next(ctx, cmds)
	}
}

// clients returns c.clients(t), counted by h.
func (h *attemptCounter) clients(t testing.TB, c *cluster) []redis.UniversalClient {
	cs := c.clients(t)
	for _, rc := range cs {
		rc.(*redis.Client).AddHook(h)
	}
	return cs
}

func (h *attemptCounter) see(cmd redis.Cmder) {
	if a := cmd.Args(); len(a) > 1 && (a[1] == acquireScript.Hash() || a[1] == acquireLua) {
		h.n.Add(1)
	}
}

// A waiter does not poll: while the lock is held (and renewed) it makes a
// handful of attempts at most, and the release wakes it. The holder's TTL
// is a minute, so the waiter's only other wake-up, the holder's remaining
// TTL, is far off: a grant within 5 s of the release came by its message.
func TestWaitIsNotified(t *testing.T) {
	c := newCluster(t, 5)
	ctx := t.Context()
	holder := c.locker(t, nil, dlock.WithTTL(time.Minute))
	counter := &attemptCounter{}
	waiter, err := New(counter.clients(t, c), testOptions(nil), dlock.WithTTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer waiter.Close()
	name := uniqueName("notify")

	lease, err := holder.Acquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan time.Time, 1)
	go func() {
		l, err := waiter.Acquire(ctx, name)
		if err != nil {
			t.Error(err)
			close(got)
			return
		}
		got <- time.Now()
		_ = l.Release(ctx)
	}()
	time.Sleep(500 * time.Millisecond)
	if err := lease.Refresh(ctx); err != nil { // a renewal, while the waiter waits
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	// Node requests per attempt: 5. First try, the try after subscribing.
	if n := counter.n.Load(); n > 2*5 {
		t.Errorf("%d phase-1 requests while the lock was held for 1s; want at most 10 (2 attempts): polling?", n)
	}
	released := time.Now()
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	at, ok := <-got
	if !ok {
		return
	}
	if wait := at.Sub(released); wait > 5*time.Second {
		t.Errorf("the waiter acquired %v after the release, the holder's TTL a minute; want it woken by the release message", wait)
	}
	t.Logf("acquired %v after the release; %d phase-1 requests in all", at.Sub(released), counter.n.Load())
}

// Close ends a wait with ErrClosed.
func TestCloseEndsWait(t *testing.T) {
	c := newCluster(t, 3)
	ctx := t.Context()
	holder := c.locker(t, nil)
	d := c.driver(t, nil)
	waiter, err := dlock.New(d)
	if err != nil {
		t.Fatal(err)
	}
	name := uniqueName("close")
	if _, err := holder.Acquire(ctx, name); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		_, err := waiter.Acquire(ctx, name)
		errc <- err
	}()
	time.Sleep(100 * time.Millisecond)
	if err := waiter.Close(); err != nil {
		t.Error(err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, dlock.ErrClosed) {
			t.Errorf("Acquire when the driver closed = %v, want ErrClosed", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Acquire did not return after Close")
	}
}

// Contenders on one name with 2 of 5 nodes down: split votes are more
// likely (a contender needs 3 of the 3 live nodes), and must resolve.
func TestContentionMinorityDown(t *testing.T) {
	c := newCluster(t, 5)
	c.kill(0, 4)
	ctx := t.Context()
	name := uniqueName("contention")
	var holders, most atomic.Int32
	done := make(chan error, 8)
	for range 8 {
		l := c.locker(t, nil)
		go func() {
			for range 10 {
				lease, err := l.Acquire(ctx, name)
				if err != nil {
					done <- err
					return
				}
				n := holders.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				holders.Add(-1)
				if err := lease.Release(ctx); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
	}
	deadline := time.After(60 * time.Second)
	for range 8 {
		select {
		case err := <-done:
			if err != nil {
				t.Error(err)
			}
		case <-deadline:
			t.Fatal("contenders did not finish")
		}
	}
	if m := most.Load(); m > 1 {
		t.Errorf("%d holders at once", m)
	}
}
