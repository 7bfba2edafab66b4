package redislock

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/internal/testenv"
)

// waitQueued waits until name's queue has n entries.
func waitQueued(t *testing.T, d *Driver, name string, n int64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if q, _ := queueState(t, d, name); q == n {
			return
		}
		if time.Now().After(deadline) {
			q, e := queueState(t, d, name)
			t.Fatalf("queue of %q: %d (entries %d), want %d", name, q, e, n)
		}
		time.Sleep(time.Millisecond)
	}
}

type lockResult struct {
	g   driver.Grant
	err error
	at  time.Time
}

// unlockThenLock releases h on d, waits for the waiter's result res, fails
// t if the waiter failed, and returns its grant and how long after the
// release it came.
func unlockThenLock(t *testing.T, d *Driver, h driver.Request, res <-chan lockResult) (driver.Grant, time.Duration) {
	t.Helper()
	released := time.Now()
	mustUnlock(t, d, h)
	got := <-res
	if got.err != nil {
		t.Fatal(got.err)
	}
	return got.g, got.at.Sub(released)
}

func lockAsync(ctx context.Context, d *Driver, r driver.Request) <-chan lockResult {
	ch := make(chan lockResult, 1)
	go func() {
		g, err := d.Lock(ctx, r)
		ch <- lockResult{g, err, time.Now()}
	}()
	return ch
}

func TestLockHandsOffInOrder(t *testing.T) {
	d := newDriver(t, nil)
	ctx := ctxTimeout(t, 20*time.Second)
	name := "fifo"
	h := request(name, 10*time.Second)
	g0, err := d.TryLock(ctx, h)
	if err != nil {
		t.Fatal(err)
	}
	var reqs []driver.Request
	var results []<-chan lockResult
	for i := range 4 {
		// Separate drivers, as separate processes would be.
		di := newDriverOn(t, d.client, quietOptions(d))
		r := request(name, quietTTL)
		reqs = append(reqs, r)
		results = append(results, lockAsync(ctx, di, r))
		waitQueued(t, d, name, int64(i+1))
	}
	prev, token := h, g0.Token
	for i, r := range reqs {
		released := time.Now()
		if err := d.Unlock(ctx, prev); err != nil {
			t.Fatal(err)
		}
		res := <-results[i]
		if res.err != nil {
			t.Fatalf("waiter %d: %v", i, res.err)
		}
		if got := holder(t, d, name); got != r.Owner {
			t.Fatalf("waiter %d returned but the lock holds %q", i, got)
		}
		if res.g.Token != token+1 {
			t.Errorf("waiter %d token %d, want %d", i, res.g.Token, token+1)
		}
		if lat := res.at.Sub(released); lat > messageBound {
			t.Errorf("waiter %d got the lock %v after the release, its re-checks 30 s apart: not by message", i, lat)
		}
		if !res.g.Expires.After(time.Now()) || res.g.Expires.After(time.Now().Add(r.TTL)) {
			t.Errorf("waiter %d: Expires %v out of range", i, res.g.Expires)
		}
		prev, token = r, res.g.Token
	}
	if err := d.Unlock(ctx, prev); err != nil {
		t.Fatal(err)
	}
	if got := holder(t, d, name); got != "" {
		t.Errorf("lock still held by %q after the last release", got)
	}
	if q, e := queueState(t, d, name); q != 0 || e != 0 {
		t.Errorf("queue left: %d, entries %d", q, e)
	}
}

// TestLostGrantMessage sends the grant message to a channel nobody
// listens to: the waiter must still get the lock at its re-check.
func TestLostGrantMessage(t *testing.T) {
	d := newDriver(t, &Options{QueueTTL: 600 * time.Millisecond})
	w := newDriverOn(t, d.client, &Options{Prefix: d.prefix, QueueTTL: 600 * time.Millisecond})
	ctx := ctxTimeout(t, 20*time.Second)
	name := "lost-grant"
	ttl := 5 * time.Second
	recheck := min(w.entryLifetime(ttl), ttl) / 3 // 200ms

	h := request(name, ttl)
	g0, err := d.TryLock(ctx, h)
	if err != nil {
		t.Fatal(err)
	}
	r := request(name, ttl)
	res := lockAsync(ctx, w, r)
	waitQueued(t, d, name, 1)
	// In one transaction, so that no re-check of the waiter comes between
	// them: point its queue entry ("<deadline> <ttl> <channel>") at a
	// channel nobody listens to, and release the lock, which hands it over.
	k := d.keys(name)
	released := time.Now()
	_, err = d.client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Eval(ctx, `local e = redis.call('HGET', KEYS[1], ARGV[1])
return redis.call('HSET', KEYS[1], ARGV[1], (string.gsub(e, ' [^ ]+$', ' ' .. ARGV[2])))`, k[3:4], r.Owner, d.prefix+"w:nobody")
		p.Eval(ctx, releaseScript.Source(), k, h.Owner, d.fenceTTL)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	got := <-res
	if got.err != nil {
		t.Fatal(got.err)
	}
	g, lat := got.g, got.at.Sub(released)
	t.Logf("lost grant recovered %v after the release (re-check interval %v)", lat, recheck)
	// The message went nowhere: only the re-check can have brought it;
	// the bound only ends a hang (the holder's TTL is 5 s, and it released).
	if lat > messageBound {
		t.Errorf("took %v, want it recovered by the re-check every %v", lat, recheck)
	}
	if g.Token != g0.Token+1 {
		t.Errorf("token %d, want %d", g.Token, g0.Token+1)
	}
	if !g.Expires.After(time.Now().Add(ttl - time.Second)) {
		t.Errorf("Expires %v: the re-check should have renewed the lock to its full TTL", g.Expires)
	}
	if q, e := queueState(t, d, name); q != 0 || e != 0 {
		t.Errorf("queue left: %d, entries %d", q, e)
	}
}

// scriptCounter counts the scripts a client runs.
type scriptCounter struct{ n atomic.Int64 }

func (h *scriptCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *scriptCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if n := cmd.Name(); n == "evalsha" || n == "eval" {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (h *scriptCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestCrashedHolder: a holder that never releases nor renews is taken over
// right when its TTL ends, after a handful of re-checks, not by polling.
func TestCrashedHolder(t *testing.T) {
	d := newDriver(t, nil)
	ttl := 600 * time.Millisecond
	// One script to queue, one when the subscription is confirmed, then
	// about one re-check per third of the TTL.
	mustTakeOver(t, d, request("crashed", ttl), request("crashed", ttl), "taken over")
}

// countingDriver returns another driver on d's prefix, over a client of its
// own that counts the scripts it runs.
func countingDriver(t *testing.T, d *Driver) (*Driver, *scriptCounter) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
	t.Cleanup(func() { _ = c.Close() })
	counter := &scriptCounter{}
	c.AddHook(counter)
	return newDriverOn(t, c, &Options{Prefix: d.prefix}), counter
}

// mustTakeOver takes crashed on d, which then never renews nor releases
// it, and waits until another driver gets r. It checks that it did once
// crashed's TTL ran out (not before; within messageBound after it, a hang
// bound) and without polling: at most 8 scripts run while waiting.
func mustTakeOver(t *testing.T, d *Driver, crashed, r driver.Request, what string) {
	t.Helper()
	ctx := ctxTimeout(t, 20*time.Second)
	ttl := crashed.TTL
	start := time.Now()
	mustLock(t, d, crashed)
	w, counter := countingDriver(t, d)
	got := <-lockAsync(ctx, w, r)
	if got.err != nil {
		t.Fatal(got.err)
	}
	after := got.at.Sub(start)
	t.Logf("%s %v after the crashed holder's acquisition (TTL %v), %d scripts run", what, after, ttl, counter.n.Load())
	if after < ttl-20*time.Millisecond || after > ttl+messageBound {
		t.Errorf("%s after %v, want right after the TTL %v", what, after, ttl)
	}
	if n := counter.n.Load(); n > 8 {
		t.Errorf("%d scripts run while waiting %v: that is polling", n, ttl)
	}
}

func TestCancelWhileQueued(t *testing.T) {
	d := newDriver(t, nil)
	ctx := ctxTimeout(t, 20*time.Second)
	name := "cancel"
	h := request(name, 10*time.Second)
	if _, err := d.TryLock(ctx, h); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
	defer cancel()
	_, err := d.Lock(wctx, request(name, 10*time.Second))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock with an ending context: %v, want DeadlineExceeded", err)
	}
	if q, e := queueState(t, d, name); q != 0 || e != 0 {
		t.Errorf("after the cancelled wait: queue %d, entries %d; want none", q, e)
	}
	if err := d.Unlock(ctx, h); err != nil {
		t.Fatal(err)
	}
	if got := holder(t, d, name); got != "" {
		t.Errorf("after the release the lock is held by %q (handed to the cancelled waiter?)", got)
	}

	// A context that is done already never acquires, even a free lock.
	done, cancel2 := context.WithCancel(ctx)
	cancel2()
	if _, err := d.Lock(done, request(name, time.Second)); !errors.Is(err, context.Canceled) {
		t.Errorf("Lock with a done context: %v, want Canceled", err)
	}
	if got := holder(t, d, name); got != "" {
		t.Errorf("a done context took the lock (%q)", got)
	}
}

// TestCancelRacesHandoff cancels waiters right around the moment the lock
// is handed to them, many times: the lock must never stay stuck.
func TestCancelRacesHandoff(t *testing.T) {
	d := newDriver(t, nil)
	w := newDriverOn(t, d.client, &Options{Prefix: d.prefix})
	ctx := ctxTimeout(t, 60*time.Second)
	name := "cancel-race"
	const rounds = 300
	var acquired, cancelledQueued, cancelledHanded int
	for i := range rounds {
		h := request(name, 10*time.Second)
		g, err := d.TryLock(ctx, h)
		if err != nil {
			t.Fatalf("round %d: the lock was not free: %v", i, err)
		}
		wctx, cancel := context.WithCancel(ctx)
		r := request(name, 10*time.Second)
		res := lockAsync(wctx, w, r)
		waitQueued(t, d, name, 1)
		cancelAfter := time.Duration(rand.N(1000)) * time.Microsecond
		var wg sync.WaitGroup
		wg.Go(func() {
			time.Sleep(cancelAfter)
			cancel()
		})
		time.Sleep(time.Duration(rand.N(300)) * time.Microsecond)
		if err := d.Unlock(ctx, h); err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
		wg.Wait()
		got := <-res
		switch {
		case got.err == nil:
			acquired++
			if err := w.Unlock(ctx, r); err != nil {
				t.Fatalf("round %d: unlock after acquiring: %v", i, err)
			}
		case errors.Is(got.err, context.Canceled):
			// Did the handoff reach the waiter before it gave up?
			c, err := d.client.Get(ctx, d.keys(name)[1]).Uint64()
			if err != nil {
				t.Fatal(err)
			}
			if c > g.Token {
				cancelledHanded++
			} else {
				cancelledQueued++
			}
		default:
			t.Fatalf("round %d: %v", i, got.err)
		}
		if h := holder(t, d, name); h != "" {
			t.Fatalf("round %d: lock stuck with %q (waiter: %v)", i, h, got.err)
		}
		if q, e := queueState(t, d, name); q != 0 || e != 0 {
			t.Fatalf("round %d: queue left: %d, entries %d", i, q, e)
		}
	}
	t.Logf("%d rounds: %d acquired, %d cancelled while queued, %d cancelled after the handoff",
		rounds, acquired, cancelledQueued, cancelledHanded)
}

// TestDeadWaiterSkipped: a waiter that stopped renewing its queue entry
// (it crashed) is passed over once the entry's lifetime ends.
func TestDeadWaiterSkipped(t *testing.T) {
	o := &Options{QueueTTL: 150 * time.Millisecond}
	d := newDriver(t, o)
	ctx := ctxTimeout(t, 20*time.Second)
	name := "dead-waiter"
	ttl := 10 * time.Second
	h := request(name, ttl)
	if _, err := d.TryLock(ctx, h); err != nil {
		t.Fatal(err)
	}
	// The dead waiter queues once and is never heard of again.
	dead := request(name, ttl)
	k := d.keys(name)
	if err := redis.NewScript(acquireScript.Source()).Run(ctx, d.client, k[:], dead.Owner, ttl.Milliseconds(), d.fenceTTL,
		d.prefix+"w:dead", d.entryLifetime(ttl).Milliseconds()).Err(); err != nil {
		t.Fatal(err)
	}
	live := request(name, ttl)
	res := lockAsync(ctx, newDriverOn(t, d.client, &Options{Prefix: d.prefix, QueueTTL: o.QueueTTL}), live)
	waitQueued(t, d, name, 2)
	time.Sleep(2 * o.QueueTTL) // the dead entry expires; the live one is renewed
	if err := d.Unlock(ctx, h); err != nil {
		t.Fatal(err)
	}
	got := <-res
	if got.err != nil {
		t.Fatal(got.err)
	}
	if hd := holder(t, d, name); hd != live.Owner {
		t.Errorf("the lock went to %q, want the live waiter", hd)
	}
}

func TestCloseEndsWaiters(t *testing.T) {
	d := newDriver(t, nil)
	w := newDriverOn(t, d.client, &Options{Prefix: d.prefix})
	ctx := ctxTimeout(t, 20*time.Second)
	name := "close"
	h := request(name, 10*time.Second)
	if _, err := d.TryLock(ctx, h); err != nil {
		t.Fatal(err)
	}
	res := lockAsync(ctx, w, request(name, 10*time.Second))
	waitQueued(t, d, name, 1)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if got := <-res; !errors.Is(got.err, driver.ErrClosed) {
		t.Errorf("waiting Lock after Close: %v, want ErrClosed", got.err)
	}
	if q, e := queueState(t, d, name); q != 0 || e != 0 {
		t.Errorf("queue left: %d, entries %d", q, e)
	}
	if _, err := w.TryLock(ctx, request(name, time.Second)); !errors.Is(err, driver.ErrClosed) {
		t.Errorf("TryLock after Close: %v, want ErrClosed", err)
	}
	// The client was the caller's: still open.
	if err := d.client.Ping(ctx).Err(); err != nil {
		t.Errorf("Close closed the caller's client: %v", err)
	}
	if err := w.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}
