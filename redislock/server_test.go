package redislock

import (
	"context"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/locktest"
)

// TestTokenSurvivesRestart: Redis without persistence loses the fencing
// counter in a restart; the counter reseeded from the server's clock must
// still be above every token handed out before.
func TestTokenSurvivesRestart(t *testing.T) {
	srv := testenv.StartRedis(t, testenv.RedisOptions{})
	d := newDriverOn(t, srv.Client(), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var last uint64
	for i := range 5 {
		r := request("restart", time.Second)
		g, err := d.TryLock(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		if g.Token <= last {
			t.Fatalf("acquisition %d: token %d after %d", i, g.Token, last)
		}
		last = g.Token
		if err := d.Unlock(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	srv.Restart()
	if n, err := srv.Client().Exists(ctx, d.keys("restart")[1]).Result(); err != nil || n != 0 {
		t.Fatalf("the counter survived the restart (exists %d, %v): not the case under test", n, err)
	}
	// The first command on the restarted server also finds the scripts
	// gone (EVALSHA falls back to EVAL) and may find stale connections.
	r := request("restart", time.Second)
	g, err := d.TryLock(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("token before the restart %d, after %d", last, g.Token)
	if g.Token <= last {
		t.Errorf("token after the restart %d is not above %d", g.Token, last)
	}
}

// TestWaiterSurvivesRestart: a waiter whose server restarts (dropping the
// lock, the queue and the subscription) still gets the lock.
func TestWaiterSurvivesRestart(t *testing.T) {
	srv := testenv.StartRedis(t, testenv.RedisOptions{})
	d := newDriverOn(t, srv.Client(), &Options{QueueTTL: 300 * time.Millisecond})
	w := newDriverOn(t, srv.Client(), &Options{Prefix: d.prefix, QueueTTL: 300 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := d.TryLock(ctx, request("restart", 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	res := lockAsync(ctx, w, request("restart", 10*time.Second))
	waitQueued(t, d, "restart", 1)
	srv.Restart()
	got := <-res
	if got.err != nil {
		t.Fatalf("waiter across a restart: %v", got.err)
	}
}

// TestSubscriptionReconnects kills the driver's pub/sub connection on the
// server: a waiter queued at that moment still gets the lock (by its
// re-check at the latest), and once the subscription is back, grants
// arrive by message again.
func TestSubscriptionReconnects(t *testing.T) {
	srv := testenv.StartRedis(t, testenv.RedisOptions{})
	admin := srv.Client()
	d := newDriverOn(t, admin, nil)
	w := newDriverOn(t, srv.Client(), &Options{Prefix: d.prefix, QueueTTL: 600 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ttl := 10 * time.Second
	recheck := w.entryLifetime(ttl) / 3 // 200ms

	cycle := func(what string, kill bool, ttl time.Duration) time.Duration {
		t.Helper()
		h := request("reconnect", ttl)
		if _, err := d.TryLock(ctx, h); err != nil {
			t.Fatal(err)
		}
		r := request("reconnect", ttl)
		res := lockAsync(ctx, w, r)
		waitQueued(t, d, "reconnect", 1)
		if kill {
			if err := admin.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Err(); err != nil {
				t.Fatal(err)
			}
		}
		released := time.Now()
		if err := d.Unlock(ctx, h); err != nil {
			t.Fatal(err)
		}
		got := <-res
		if got.err != nil {
			t.Fatalf("%s: %v", what, got.err)
		}
		if err := w.Unlock(ctx, r); err != nil {
			t.Fatal(err)
		}
		lat := got.at.Sub(released)
		t.Logf("%s: lock received %v after the release", what, lat)
		return lat
	}

	cycle("first wait (subscribes)", false, ttl)
	// The message is lost with the subscription: the re-check, every
	// 200ms, brings the lock; the bound only ends a hang.
	if lat := cycle("subscription killed while queued", true, ttl); lat > messageBound {
		t.Errorf("took %v, want it brought by the re-check every %v", lat, recheck)
	}
	// Wait for the listener to subscribe again.
	deadline := time.Now().Add(5 * time.Second)
	for {
		n, err := admin.PubSubNumSub(ctx, w.channel).Result()
		if err != nil {
			t.Fatal(err)
		}
		if n[w.channel] == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the driver did not subscribe again")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Now with re-checks 30 s apart (quietTTL): a grant within
	// messageBound came by message, on the new subscription.
	w.queueTTL = quietTTL
	if lat := cycle("after resubscribing", false, quietTTL); lat > messageBound {
		t.Errorf("took %v, with re-checks 30 s apart: the grant did not come by message", lat)
	}
}

// TestFreeLockSkipsQueue: a free lock taken and released through a
// Locker, with nobody waiting, costs SET NX PX and INCR to take and
// EXISTS of the queue and an owner-checked DEL to release: no command
// writes a queue key and nothing is published. The counter a first
// acquisition creates gets its expiry.
func TestFreeLockSkipsQueue(t *testing.T) {
	srv := testenv.StartRedis(t, testenv.RedisOptions{})
	c := srv.Client()
	d := newDriverOn(t, c, nil)
	l := locktest.New(t, d)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cycle := func() {
		t.Helper()
		lease, err := l.Acquire(ctx, "free")
		if err != nil {
			t.Fatal(err)
		}
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	cycle() // loads the scripts and asks once whether there are replicas
	if ttl, err := c.PTTL(ctx, d.keys("free")[1]).Result(); err != nil || ttl <= 0 {
		t.Fatalf("the new counter's PTTL is %v (%v), want its expiry", ttl, err)
	}
	if err := c.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	const n = 20
	for range n {
		cycle()
	}
	stats, err := commandStats(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"evalsha": 2 * n, "set": n, "incr": n, "exists": n, "get": n, "del": n}
	for name, st := range stats {
		if name == "config|resetstat" {
			continue
		}
		if st.calls != want[name] {
			t.Errorf("%s ran %d times in %d acquire+release cycles, want %d", name, st.calls, n, want[name])
		}
	}
	for name, calls := range want {
		if stats[name].calls != calls {
			t.Errorf("%s ran %d times in %d cycles, want %d", name, stats[name].calls, n, calls)
		}
	}
}

// TestWaitingGauge: dlock.waiting counts a Locker's waiting Acquire calls
// and comes back to zero however they end.
func TestWaitingGauge(t *testing.T) {
	c := testenv.RedisClient(t)
	prefix := testPrefix(t, c)
	locktest.WaitingGauge(t, func(t *testing.T, opts ...dlock.Option) *dlock.Locker {
		return locktest.New(t, newDriverOn(t, c, &Options{Prefix: prefix}), opts...)
	})
}

// TestTracing: with a tracer provider, an acquisition on Redis is a
// dlock.acquire span with its token under the caller's span, a release a
// dlock.release span, and an operator's delete of the lock a dlock.lost
// event (reason gone) on the caller's span.
func TestTracing(t *testing.T) {
	c := testenv.RedisClient(t)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	d := newDriverOn(t, c, nil)
	l := locktest.New(t, d, dlock.WithTracerProvider(tp), dlock.WithTTL(300*time.Millisecond))
	ctx, request := tp.Tracer("test").Start(locktest.Context(t, time.Minute), "request")
	if err := locktest.Must(t)(l.Acquire(ctx, "traced")).Release(ctx); err != nil {
		t.Fatal(err)
	}
	lease := locktest.Must(t)(l.Acquire(ctx, "traced"))
	if err := c.Del(ctx, d.keys("traced")[0]).Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lease.Done():
	case <-ctx.Done():
		t.Fatal("the lease whose lock was deleted did not end")
	}
	request.End()
	names := map[string]int{}
	for _, s := range rec.Ended() {
		names[s.Name()]++
		if s.Name() == "request" {
			for _, e := range s.Events() {
				if e.Name == "dlock.lost" {
					names["dlock.lost event"]++
				}
			}
			continue
		}
		if s.Parent().SpanID() != request.SpanContext().SpanID() {
			t.Errorf("%s is not a child of the caller's span", s.Name())
		}
	}
	if names["dlock.acquire"] != 2 || names["dlock.release"] != 1 || names["dlock.lost event"] != 1 {
		t.Errorf("spans and events %v, want 2 dlock.acquire, 1 dlock.release, 1 dlock.lost event", names)
	}
}
