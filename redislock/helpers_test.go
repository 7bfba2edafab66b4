package redislock

import (
	"context"
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
