package interop

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"testing"
	"time"

	bsm "github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/redislock"
)

// The peers of dlock's layout=redsync, driven as their users drive them:
// redsync (github.com/go-redsync/redsync/v4) over go-redis v9 with its
// default retry delays, and bsm/redislock (github.com/bsm/redislock)
// with the linear 100ms backoff of its example. Each acquisition is a
// peerLock of the library's own (a *redsync.Mutex, a *bsm.Lock), which
// renews and releases by its own scripts.

// peer is one of the libraries under test, on one client.
type peer interface {
	// acquire takes key for ttl, polling as the library does until ctx
	// ends.
	acquire(ctx context.Context, key string, ttl time.Duration) (peerLock, error)
	// try makes one attempt; ok is false when another holds key.
	try(ctx context.Context, key string, ttl time.Duration) (l peerLock, ok bool, err error)
}

// peerLock is one acquisition of a peer's.
type peerLock interface {
	// renew extends the lock to ttl; false when the peer no longer
	// holds it.
	renew(ctx context.Context, ttl time.Duration) (bool, error)
	// release deletes the lock; false when the peer no longer held it.
	release(ctx context.Context) (bool, error)
	// value is what the peer stored in the key.
	value() string
}

// peers returns the two peers, each on a client of its own.
func peers(t testing.TB) map[string]func(t testing.TB) peer {
	return map[string]func(t testing.TB) peer{
		"redsync": func(t testing.TB) peer { return redsyncPeer{rs: redsync.New(goredis.NewPool(newRedisClient(t)))} },
		"bsm":     func(t testing.TB) peer { return bsmPeer{c: bsm.New(newRedisClient(t))} },
	}
}

// newRedisClient returns a client of the shared Redis, closed when t ends.
func newRedisClient(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// ---- redsync ----

type redsyncPeer struct{ rs *redsync.Redsync }

// mutex returns a redsync mutex of key with the given expiry and the
// library's default retry delay (50 to 250 ms), trying until ctx ends.
func (p redsyncPeer) mutex(key string, ttl time.Duration, tries int, opts ...redsync.Option) *redsync.Mutex {
	return p.rs.NewMutex(key, append([]redsync.Option{redsync.WithExpiry(ttl), redsync.WithTries(tries)}, opts...)...)
}

func (p redsyncPeer) acquire(ctx context.Context, key string, ttl time.Duration) (peerLock, error) {
	m := p.mutex(key, ttl, 1<<30)
	if err := m.LockContext(ctx); err != nil {
		return nil, errors.Join(err, ctx.Err())
	}
	return redsyncLock{m}, nil
}

func (p redsyncPeer) try(ctx context.Context, key string, ttl time.Duration) (peerLock, bool, error) {
	m := p.mutex(key, ttl, 1)
	err := m.TryLockContext(ctx)
	switch {
	case err == nil:
		return redsyncLock{m}, true, nil
	case isRedsyncMiss(err), errors.Is(err, redsync.ErrFailed):
		return nil, false, nil
	}
	return nil, false, err
}

type redsyncLock struct{ m *redsync.Mutex }

func (l redsyncLock) renew(ctx context.Context, ttl time.Duration) (bool, error) {
	// A Mutex extends by its own expiry: ttl is the one it was made with.
	ok, err := l.m.ExtendContext(ctx)
	if errors.Is(err, redsync.ErrExtendFailed) || isRedsyncMiss(err) {
		return false, nil
	}
	return ok, err
}

func (l redsyncLock) release(ctx context.Context) (bool, error) {
	ok, err := l.m.UnlockContext(ctx)
	if errors.Is(err, redsync.ErrLockAlreadyExpired) || isRedsyncMiss(err) {
		return false, nil
	}
	return ok, err
}

func (l redsyncLock) value() string { return l.m.Value() }

// isRedsyncMiss reports whether err is redsync's report that the node
// held another value than the caller's (*ErrTaken for the quorum of one
// node, *ErrNodeTaken for the node), which on one node is a plain "not
// held".
func isRedsyncMiss(err error) bool {
	var taken *redsync.ErrTaken
	var node *redsync.ErrNodeTaken
	return errors.As(err, &taken) || errors.As(err, &node)
}

// ---- bsm/redislock ----

type bsmPeer struct{ c *bsm.Client }

// bsmRetry is the retry of bsm/redislock's example: every 100 ms.
const bsmRetry = 100 * time.Millisecond

func (p bsmPeer) acquire(ctx context.Context, key string, ttl time.Duration) (peerLock, error) {
	l, err := p.c.Obtain(ctx, key, ttl, &bsm.Options{RetryStrategy: bsm.LinearBackoff(bsmRetry)})
	if err != nil {
		return nil, err
	}
	return bsmLock{l, ttl}, nil
}

func (p bsmPeer) try(ctx context.Context, key string, ttl time.Duration) (peerLock, bool, error) {
	l, err := p.c.Obtain(ctx, key, ttl, nil)
	switch {
	case err == nil:
		return bsmLock{l, ttl}, true, nil
	case errors.Is(err, bsm.ErrNotObtained):
		return nil, false, nil
	}
	return nil, false, err
}

type bsmLock struct {
	l   *bsm.Lock
	ttl time.Duration
}

func (l bsmLock) renew(ctx context.Context, ttl time.Duration) (bool, error) {
	err := l.l.Refresh(ctx, ttl, nil)
	if errors.Is(err, bsm.ErrNotObtained) {
		return false, nil
	}
	return err == nil, err
}

func (l bsmLock) release(ctx context.Context) (bool, error) {
	err := l.l.Release(ctx)
	if errors.Is(err, bsm.ErrLockNotHeld) {
		return false, nil
	}
	return err == nil, err
}

func (l bsmLock) value() string { return l.l.Token() + l.l.Metadata() }

// ---- dlock ----

// redisPrefix returns a key prefix of the test's own on the shared
// server, and removes the test's keys, and dlock's counters beside them,
// when it ends.
func redisPrefix(t testing.TB) string {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	p := "dlockinterop:" + hex.EncodeToString(b[:]) + ":"
	c := newRedisClient(t)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for _, pattern := range []string{p + "*", "dlock:fence:{" + p + "*"} {
			iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
			for iter.Next(ctx) {
				c.Del(ctx, iter.Val())
			}
		}
	})
	return p
}

// newDlock returns a Locker in layout=redsync under prefix, on a client
// of its own, as another process would have; closed when t ends.
func newDlock(t testing.TB, prefix string, opts ...dlock.Option) *dlock.Locker {
	t.Helper()
	l, err := redislock.New(newRedisClient(t), &redislock.Options{Layout: redislock.LayoutRedsync, Prefix: prefix}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}
