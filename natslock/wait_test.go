package natslock_test

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/locktest"
	"github.com/dlockgo/dlock/natslock"
)

type result struct {
	g   driver.Grant
	err error
	at  time.Time
}

func lockAsync(ctx context.Context, d *natslock.Driver, r driver.Request) <-chan result {
	ch := make(chan result, 1)
	go func() {
		g, err := d.Lock(ctx, r)
		ch <- result{g, err, time.Now()}
	}()
	return ch
}

// TestWaiterWokenByRelease: a waiter gets the lock after the holder's
// release, by the watch: the holder's TTL (30s) is far away and the
// waiter's one timer is set at it, so a grant within 10s of the release
// (a hang bound, over 10× the milliseconds a handoff takes) can only come
// from the watch.
func TestWaiterWokenByRelease(t *testing.T) {
	c := testenv.StartNATS(t, 1)
	o := &natslock.Options{Bucket: randomBucket()}
	a, b := newDriver(t, c, o), newDriver(t, c, o)
	ctx := ctxTimeout(t, 60*time.Second)
	var took []time.Duration
	for range 20 {
		h := request("handoff", 30*time.Second)
		hg, err := a.TryLock(ctx, h)
		if err != nil {
			t.Fatal(err)
		}
		w := request("handoff", 30*time.Second)
		res := lockAsync(ctx, b, w)
		time.Sleep(50 * time.Millisecond) // the waiter watches
		select {
		case r := <-res:
			t.Fatalf("Lock returned while the lock was held: %+v", r)
		default:
		}
		released := time.Now()
		if err := a.Unlock(ctx, h); err != nil {
			t.Fatal(err)
		}
		var r result
		select {
		case r = <-res:
		case <-time.After(10 * time.Second):
			t.Fatal("the waiter did not get the lock 10s after the release, with the holder's TTL 30s")
		}
		if r.err != nil {
			t.Fatal(r.err)
		}
		if r.g.Token <= hg.Token {
			t.Errorf("the waiter's token %d is not above the holder's %d", r.g.Token, hg.Token)
		}
		took = append(took, r.at.Sub(released))
		if err := b.Unlock(ctx, w); err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(took)
	t.Logf("waiter granted after the release: p50 %v, max %v (%d runs)", took[len(took)/2], took[len(took)-1], len(took))
}

// TestWaiterWokenByExpiry: a holder that never renews loses its key when
// its TTL runs out; the marker the server leaves then wakes the waiter,
// which gets the lock not before the TTL (and within a hang bound of 10×
// the TTL).
func TestWaiterWokenByExpiry(t *testing.T) {
	c := testenv.StartNATS(t, 1)
	o := &natslock.Options{Bucket: randomBucket()}
	a, b := newDriver(t, c, o), newDriver(t, c, o)
	ctx := ctxTimeout(t, 60*time.Second)
	kv := admin(t, c, o.Bucket)
	markers, err := kv.Watch(ctx, "mutex.expiry", jetstream.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer markers.Stop()
	const ttl = 2 * time.Second
	sent := time.Now()
	if _, err := a.TryLock(ctx, request("expiry", ttl)); err != nil {
		t.Fatal(err)
	}
	res := lockAsync(ctx, b, request("expiry", ttl))
	var markerAt time.Time
	for e := range markers.Updates() {
		if e != nil && e.Operation() == jetstream.KeyValuePurge {
			markerAt = time.Now()
			break
		}
	}
	r := <-res
	if r.err != nil {
		t.Fatal(r.err)
	}
	got := r.at.Sub(sent)
	t.Logf("the expiry marker came %v after the lock was asked for (TTL %v); the waiter had it %v after the marker",
		markerAt.Sub(sent), ttl, r.at.Sub(markerAt))
	if got < ttl*9/10 || got > 10*ttl {
		t.Errorf("the waiter got the expired lock %v after it was taken, want between the TTL %v and 10× it", got, ttl)
	}
}

// TestCancelDuringWait: a waiting Lock returns soon after its context
// ends, with the context's error, and leaves nothing on the store.
func TestCancelDuringWait(t *testing.T) {
	c := testenv.StartNATS(t, 1)
	o := &natslock.Options{Bucket: randomBucket()}
	a, b := newDriver(t, c, o), newDriver(t, c, o)
	ctx := ctxTimeout(t, 30*time.Second)
	h := request("cancel", 30*time.Second)
	if _, err := a.TryLock(ctx, h); err != nil {
		t.Fatal(err)
	}
	for _, wait := range []time.Duration{0, 10 * time.Millisecond, 200 * time.Millisecond} {
		wctx, cancel := context.WithTimeout(ctx, wait)
		start := time.Now()
		_, err := b.Lock(wctx, request("cancel", 30*time.Second))
		cancel()
		// A hang bound: over 10× the longest deadline.
		if took := time.Since(start); took > wait+2*time.Second {
			t.Errorf("Lock with a %v deadline returned after %v", wait, took)
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Lock past its deadline = %v, want DeadlineExceeded", err)
		}
	}
	locks, err := b.Inspect(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(locks) != 1 || locks[0].Owner != h.Owner {
		t.Errorf("Inspect after the cancelled waits = %+v, want the holder's lock alone", locks)
	}
}

// TestNoGoroutineLeak: waiting, cancelling, handing off, observing and
// closing leave no goroutine behind once the connection is closed.
func TestNoGoroutineLeak(t *testing.T) {
	c := testenv.StartNATS(t, 1)
	before := runtime.NumGoroutine()
	func() {
		nc, err := nats.Connect(c.ServerURLs())
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		js, _ := jetstream.New(nc)
		ctx := ctxTimeout(t, 30*time.Second)
		d, err := natslock.NewDriver(ctx, js, &natslock.Options{Bucket: randomBucket()})
		if err != nil {
			t.Fatal(err)
		}
		h := request("leak", 10*time.Second)
		if _, err := d.TryLock(ctx, h); err != nil {
			t.Fatal(err)
		}
		locktest.GiveUpWaits(ctx, d, "leak")
		octx, ocancel := context.WithCancel(ctx)
		obs, err := d.Observe(octx, "leak")
		if err != nil {
			t.Fatal(err)
		}
		<-obs
		ocancel()
		for range obs {
		}
		r := request("leak", 10*time.Second)
		res := lockAsync(ctx, d, r)
		time.Sleep(50 * time.Millisecond)
		_ = d.Unlock(ctx, h)
		if got := <-res; got.err != nil {
			t.Fatal(got.err)
		}
		res = lockAsync(ctx, d, request("leak", time.Second)) // ends by Close
		time.Sleep(50 * time.Millisecond)
		_ = d.Close()
		if got := <-res; !errors.Is(got.err, driver.ErrClosed) {
			t.Errorf("Lock ended by Close = %v, want ErrClosed", got.err)
		}
	}()
	locktest.NoLeak(t, before)
}
