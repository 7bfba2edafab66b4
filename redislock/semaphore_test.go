package redislock

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockgo/dlock/driver"
)

func TestSemaphoreTryLock(t *testing.T) {
	d := newDriver(t, nil)
	ctx := ctxTimeout(t, 10*time.Second)
	name := "sem/try"
	const limit = 3
	var holders []driver.Request
	var last uint64
	for range limit {
		r := permitRequest(name, limit, 10*time.Second)
		tok := mustLock(t, d, r)
		if tok <= last {
			t.Errorf("token %d not above %d", tok, last)
		}
		last = tok
		holders = append(holders, r)
	}
	held := mustNotLock(t, d, permitRequest(name, limit, 10*time.Second))
	if held.Remaining <= 9*time.Second || held.Remaining > 10*time.Second {
		t.Errorf("Remaining %v, want the earliest holder's (about 10s)", held.Remaining)
	}
	// A larger limit lets one more in: the limit is the caller's.
	more := permitRequest(name, limit+1, 10*time.Second)
	mustLock(t, d, more)
	mustUnlock(t, d, more)

	stranger := permitRequest(name, limit, 10*time.Second)
	if err := d.Unlock(ctx, stranger); !errors.Is(err, driver.ErrNotHeld) {
		t.Errorf("Unlock by a non-holder: %v, want ErrNotHeld", err)
	}
	if _, err := d.Renew(ctx, stranger); !errors.Is(err, driver.ErrNotHeld) {
		t.Errorf("Renew by a non-holder: %v, want ErrNotHeld", err)
	}
	if _, err := d.Renew(ctx, holders[0]); err != nil {
		t.Errorf("Renew by a holder: %v", err)
	}
	mustUnlock(t, d, holders[1])
	if err := d.Unlock(ctx, holders[1]); !errors.Is(err, driver.ErrNotHeld) {
		t.Errorf("second Unlock: %v, want ErrNotHeld", err)
	}
	if tok := mustLock(t, d, stranger); tok <= last {
		t.Errorf("token %d not above %d", tok, last)
	}
}

// TestSemaphoreNeverOverLimit: 32 goroutines, each with its own driver,
// take permits of a semaphore of 3 through Lockers; never more than 3
// hold at once, and the limit is reached.
func TestSemaphoreNeverOverLimit(t *testing.T) {
	d := newDriver(t, nil)
	ctx := ctxTimeout(t, 60*time.Second)
	const workers, limit, rounds = 32, 3, 8
	var holding, most atomic.Int32
	// The first holders wait (up to 10 s) until limit hold at once, so
	// that reaching the limit is the semaphore's doing, not the
	// scheduler's.
	reached := make(chan struct{})
	var reachOnce sync.Once
	var wg sync.WaitGroup
	var mu sync.Mutex
	tokens := map[uint64]bool{}
	for range workers {
		l := newLocker(t, d)
		wg.Go(func() {
			for range rounds {
				lease, err := l.AcquirePermit(ctx, "sem/32", limit)
				if err != nil {
					t.Error(err)
					return
				}
				n := holding.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				if n >= limit {
					reachOnce.Do(func() { close(reached) })
				}
				select {
				case <-reached:
				case <-time.After(10 * time.Second):
				}
				mu.Lock()
				if tokens[lease.Token()] {
					t.Errorf("token %d granted twice", lease.Token())
				}
				tokens[lease.Token()] = true
				mu.Unlock()
				time.Sleep(time.Millisecond)
				holding.Add(-1)
				if err := lease.Release(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	t.Logf("%d permits granted, at most %d held at once", len(tokens), most.Load())
	if m := most.Load(); m > limit {
		t.Errorf("%d holders at once, limit %d", m, limit)
	} else if m < limit {
		t.Errorf("at most %d holders at once: the limit %d was never reached, the test proves little", m, limit)
	}
	if len(tokens) != workers*rounds {
		t.Errorf("%d grants, want %d", len(tokens), workers*rounds)
	}
}

// TestSemaphoreCrashedHolder: a holder that never renews nor releases
// gives its permit back when its TTL ends; a waiter gets it right then,
// after a handful of re-checks, not by polling.
func TestSemaphoreCrashedHolder(t *testing.T) {
	d := newDriver(t, nil)
	name := "sem/crashed"
	mustLock(t, d, permitRequest(name, 2, 10*time.Second)) // alive, never released here
	crashed := permitRequest(name, 2, 600*time.Millisecond)
	mustTakeOver(t, d, crashed, permitRequest(name, 2, 10*time.Second), "permit taken over")
	if _, err := d.Renew(ctxTimeout(t, 5*time.Second), crashed); !errors.Is(err, driver.ErrNotHeld) {
		t.Errorf("Renew by the expired holder: %v, want ErrNotHeld", err)
	}
}

// TestSemaphoreHandsOffInOrder: released permits go to waiters in order
// of arrival, by message.
func TestSemaphoreHandsOffInOrder(t *testing.T) {
	d := newDriver(t, nil)
	ctx := ctxTimeout(t, 20*time.Second)
	name := "sem/fifo"
	const limit = 2
	h1, h2 := permitRequest(name, limit, 10*time.Second), permitRequest(name, limit, 10*time.Second)
	mustLock(t, d, h1)
	mustLock(t, d, h2)
	var waiters []driver.Request
	var results []<-chan lockResult
	for i := range 3 {
		r := permitRequest(name, limit, quietTTL)
		waiters = append(waiters, r)
		results = append(results, lockAsync(ctx, newDriverOn(t, d.client, quietOptions(d)), r))
		waitKindQueued(t, d, r, int64(i+1))
	}
	for i, prev := range []driver.Request{h1, h2, waiters[0]} {
		released := time.Now()
		mustUnlock(t, d, prev)
		got := <-results[i]
		if got.err != nil {
			t.Fatalf("waiter %d: %v", i, got.err)
		}
		if lat := got.at.Sub(released); lat > messageBound {
			t.Errorf("waiter %d got its permit %v after the release, its re-checks 30 s apart: not by message", i, lat)
		}
		for j := i + 1; j < len(results); j++ {
			select {
			case <-results[j]:
				t.Fatalf("waiter %d got a permit before waiter %d's turn", j, i)
			default:
			}
		}
	}
}
