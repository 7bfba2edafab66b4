package redislock

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/locktest"
)

var (
	randomHex  = locktest.RandomHex
	request    = locktest.Request
	ctxTimeout = locktest.Context
)

// testPrefix returns a key prefix of the test's own on the shared server,
// and removes the test's keys when it ends.
func testPrefix(t testing.TB, c redis.UniversalClient) string {
	p := "dlocktest:" + randomHex(6) + ":"
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		iter := c.Scan(ctx, 0, p+"*", 1000).Iterator()
		for iter.Next(ctx) {
			c.Del(ctx, iter.Val())
		}
	})
	return p
}

// newDriver returns a driver on the shared Redis with a prefix of the
// test's own, closed when the test ends.
func newDriver(t testing.TB, o *Options) *Driver {
	t.Helper()
	c := testenv.RedisClient(t)
	return newDriverOn(t, c, o)
}

func newDriverOn(t testing.TB, c redis.UniversalClient, o *Options) *Driver {
	t.Helper()
	var opt Options
	if o != nil {
		opt = *o
	}
	if opt.Prefix == "" {
		opt.Prefix = testPrefix(t, c)
	}
	d := NewDriver(c, &opt)
	t.Cleanup(func() { _ = d.Close() })
	return d
}

// newLocker returns a Locker over a new driver that shares d's client and
// options (an independent subscription, as another process would have).
func newLocker(t testing.TB, d *Driver, opts ...dlock.Option) *dlock.Locker {
	t.Helper()
	return locktest.New(t, NewDriver(d.client, &Options{Prefix: d.prefix, QueueTTL: d.queueTTL}), opts...)
}

// Under quietOptions and a lock TTL of quietTTL a waiter re-runs its
// script only every 30 s (a third of its entry lifetime) and its lock does
// not expire for 90 s: a grant within messageBound of a release came by
// message (or by the timer set to a holder's known expiry), not by a
// re-check. messageBound only bounds a hang: a handoff takes a round trip.
const (
	quietTTL     = 90 * time.Second
	messageBound = 5 * time.Second
)

// quietOptions are the options of a waiter's driver on d's prefix whose
// re-checks, at quietTTL, are 30 s apart.
func quietOptions(d *Driver) *Options { return &Options{Prefix: d.prefix, QueueTTL: quietTTL} }

// queueState returns the queue's length and number of entries for name.
func queueState(t testing.TB, d *Driver, name string) (int64, int64) {
	t.Helper()
	ctx := ctxTimeout(t, 5*time.Second)
	k := d.keys(name)
	n, err := d.client.LLen(ctx, k[2]).Result()
	if err != nil {
		t.Fatal(err)
	}
	m, err := d.client.HLen(ctx, k[3]).Result()
	if err != nil {
		t.Fatal(err)
	}
	return n, m
}

// holder returns the owner value stored in the lock, or "".
func holder(t testing.TB, d *Driver, name string) string {
	t.Helper()
	v, err := d.client.Get(ctxTimeout(t, 5*time.Second), d.keys(name)[0]).Result()
	if err == redis.Nil {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestConformance runs dlock's conformance suite against the shared Redis.
// Every Locker has a client of its own, as separate processes would.
func TestConformance(t *testing.T) {
	addr := testenv.RedisAddr(t)
	admin := testenv.RedisClient(t)
	prefix := testPrefix(t, admin)
	conform(t, admin, LayoutDlock, prefix, func(t *testing.T, opts ...dlock.Option) *dlock.Locker {
		return ownClientLocker(t, &redis.Options{Addr: addr}, &Options{Prefix: prefix}, opts...)
	})
}

// conform runs dlock's conformance suite over the Lockers of newLocker, in
// layout, on keys under prefix, which admin deletes to take a lock away.
func conform(t *testing.T, admin redis.Cmdable, layout Layout, prefix string,
	newLocker func(t *testing.T, opts ...dlock.Option) *dlock.Locker) {
	locktest.Run(t, locktest.Harness{
		NewLocker: newLocker,
		TakeAway: func(t *testing.T, name string) {
			key := prefix + "{" + name + "}"
			if layout == LayoutRedsync {
				key = prefix + name
			}
			if err := admin.Del(t.Context(), key).Err(); err != nil {
				t.Fatal(err)
			}
		},
		TTL: 500 * time.Millisecond,
	})
}

// ownClientLocker returns a Locker with the options o over a client of
// its own, made with co, as separate processes would have; the client is
// closed after the Locker.
func ownClientLocker(t *testing.T, co *redis.Options, o *Options, opts ...dlock.Option) *dlock.Locker {
	c := redis.NewClient(co)
	t.Cleanup(func() { _ = c.Close() }) // after the suite closes the Locker
	l, err := New(c, o, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestNoGoroutineLeak: waiting, cancelling, handing off and closing leave
// no goroutine behind, with a caller's client or one opened from a URL.
func TestNoGoroutineLeak(t *testing.T) {
	before := runtime.NumGoroutine()
	func() {
		c := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
		defer c.Close()
		d := NewDriver(c, &Options{Prefix: "dlocktest:" + randomHex(6) + ":"})
		ctx := ctxTimeout(t, 20*time.Second)
		h := request("leak", 10*time.Second)
		if _, err := d.TryLock(ctx, h); err != nil {
			t.Fatal(err)
		}
		locktest.GiveUpWaits(ctx, d, "leak")
		r := request("leak", 10*time.Second)
		res := lockAsync(ctx, d, r)
		waitQueued(t, d, "leak", 1)
		_ = d.Unlock(ctx, h)
		if got := <-res; got.err != nil {
			t.Fatal(got.err)
		}
		_ = d.Unlock(ctx, r)
		res = lockAsync(ctx, d, request("leak", time.Second)) // ends by Close
		_ = d.Close()
		<-res
	}()
	func() {
		// A Locker opened from a URL owns its client: Close ends it all.
		ctx := ctxTimeout(t, 20*time.Second)
		url := "redis://" + testenv.RedisAddr(t) + "?prefix=dlocktest:" + randomHex(6) + ":"
		a, b := openURL(t, url), openURL(t, url)
		lease, err := a.Acquire(ctx, "leak")
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		wg.Go(func() {
			l, err := b.Acquire(ctx, "leak")
			if err != nil {
				t.Error(err)
				return
			}
			_ = l.Release(ctx)
		})
		waitQueued(t, a.Driver().(*Driver), "leak", 1)
		_ = lease.Release(ctx)
		wg.Wait()
		_ = a.Close()
		_ = b.Close()
	}()
	locktest.NoLeak(t, before)
}
