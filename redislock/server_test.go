package redislock

import (
	"context"
	"testing"
	"time"

	"github.com/dlockgo/dlock/internal/testenv"
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
