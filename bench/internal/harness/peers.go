package harness

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
)

// ---- raw go-redis loop ----

// RawRetry is the raw loop's fixed pause between SET NX attempts while the
// key is held: no library's default, a common hand-written choice.
const RawRetry = 10 * time.Millisecond

// rawRelease deletes the key only if it still holds our value.
var rawRelease = redis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`)

type raw struct {
	c     *redis.Client
	ttlMS string
}

func newRaw(e *Env) (Impl, error) {
	return &raw{c: NewClient(e.Shared), ttlMS: strconv.FormatInt(TTL.Milliseconds(), 10)}, nil
}

func newRawHop(e *Env) (Impl, error) {
	im, err := newRaw(e)
	if err != nil {
		return nil, err // not a hop around nothing: callers may test the Impl
	}
	return hop{im}, nil
}

// hop makes each call of an Impl from a goroutine of its own.
type hop struct{ Impl }

type hopResult struct {
	h   Held
	err error
}

func (p hop) Acquire(ctx context.Context, key string) (Held, error) {
	ch := make(chan hopResult, 1)
	go func() {
		h, err := p.Impl.Acquire(ctx, key)
		ch <- hopResult{h, err}
	}()
	r := <-ch
	if r.err != nil {
		return nil, r.err
	}
	return hopHeld{r.h}, nil
}

type hopHeld struct{ Held }

func (h hopHeld) Release(ctx context.Context) error {
	ch := make(chan error, 1)
	go func() { ch <- h.Held.Release(ctx) }()
	return <-ch
}

type rawHeld struct {
	c   *redis.Client
	key string
	val string
}

func (r *raw) Acquire(ctx context.Context, key string) (Held, error) {
	val := ownerValue()
	return poll(ctx, func() (Held, error) {
		// SET key val NX PX ttl
		err := r.c.Do(ctx, "set", key, val, "nx", "px", r.ttlMS).Err()
		if err == nil {
			return &rawHeld{c: r.c, key: key, val: val}, nil
		}
		if errors.Is(err, redis.Nil) {
			return nil, errHeld
		}
		return nil, err
	})
}

// errHeld is what a raw loop's attempt returns when the key is held.
var errHeld = errors.New("held")

// poll is the raw loops' waiting: it calls try until it returns anything
// but errHeld, sleeping RawRetry between attempts, or until ctx ends.
func poll(ctx context.Context, try func() (Held, error)) (Held, error) {
	var t *time.Timer
	for {
		h, err := try()
		if !errors.Is(err, errHeld) {
			return h, err
		}
		if t == nil {
			t = time.NewTimer(RawRetry)
			defer t.Stop()
		} else {
			t.Reset(RawRetry)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

func (h *rawHeld) Release(ctx context.Context) error {
	n, err := rawRelease.Run(ctx, h.c, []string{h.key}, h.val).Int()
	if err != nil {
		return err
	}
	if n != 1 {
		return errors.New("raw: lock not held at release")
	}
	return nil
}

func (r *raw) Close() error { return r.c.Close() }

// ---- github.com/bsm/redislock ----

// BSMMinBackoff and BSMMaxBackoff bound bsm/redislock's ExponentialBackoff,
// since by default a waiting Obtain does not retry at all: its
// documentation recommends a minimum of 16 ms at least; the maximum is of
// the order of redsync's default retry delay (50-250 ms).
const (
	BSMMinBackoff = 16 * time.Millisecond
	BSMMaxBackoff = 256 * time.Millisecond
)

type bsm struct {
	c  *redis.Client
	lc *redislock.Client
}

func newBSM(e *Env) (Impl, error) {
	c := NewClient(e.Shared)
	return &bsm{c: c, lc: redislock.New(c)}, nil
}

func (b *bsm) Acquire(ctx context.Context, key string) (Held, error) {
	// The strategy counts attempts, so each Obtain needs its own.
	return b.lc.Obtain(ctx, key, TTL, &redislock.Options{
		RetryStrategy: redislock.ExponentialBackoff(BSMMinBackoff, BSMMaxBackoff),
	})
}

func (b *bsm) Close() error { return b.c.Close() }

// ---- github.com/go-redsync/redsync/v4 ----

type rs struct {
	clients []*redis.Client
	rs      *redsync.Redsync
}

func newRedsync(addrs []string) (Impl, error) {
	if len(addrs) == 0 {
		return nil, errors.New("redsync: no nodes")
	}
	r := &rs{}
	var pools []redsyncredis.Pool
	for _, a := range addrs {
		c := NewClient(a)
		r.clients = append(r.clients, c)
		pools = append(pools, goredis.NewPool(c))
	}
	r.rs = redsync.New(pools...)
	return r, nil
}

func newRedsync1(e *Env) (Impl, error) { return newRedsync([]string{e.Shared}) }

func newRedsync5(e *Env) (Impl, error) {
	if len(e.Nodes) < 5 {
		return nil, fmt.Errorf("redsync-5 needs 5 nodes, have %d", len(e.Nodes))
	}
	return newRedsync(e.Nodes[:5])
}

type rsHeld struct{ m *redsync.Mutex }

// Acquire makes a mutex per acquisition, as redsync's README does, with
// the default retry policy (32 tries, 50-250 ms apart). When LockContext
// gives up (ErrFailed after its tries), the caller keeps waiting: Acquire
// is called again by the scenario, and the wait counts from the first try.
func (r *rs) Acquire(ctx context.Context, key string) (Held, error) {
	m := r.rs.NewMutex(key, redsync.WithExpiry(TTL))
	if err := m.LockContext(ctx); err != nil {
		if ctx.Err() != nil {
			return nil, errors.Join(ctx.Err(), err)
		}
		return nil, err
	}
	return rsHeld{m}, nil
}

func (h rsHeld) Release(ctx context.Context) error {
	ok, err := h.m.UnlockContext(ctx)
	if err != nil {
		return err
	}
	if !ok {
		return errors.New("redsync: unlock reached no quorum")
	}
	return nil
}

func (r *rs) Close() error {
	var errs []error
	for _, c := range r.clients {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

// ---- raw go-redis loops with scripts on both sides ----

var (
	// rawLuaAcquire is bsm/redislock's acquisition of a free key.
	rawLuaAcquire = redis.NewScript(`if redis.call("set", KEYS[1], ARGV[1], "NX", "PX", ARGV[2]) then return 1 end return 0`)
	// rawFencedAcquire adds dlock's fencing counter to it (dlock's
	// acquire.lua on a free lock, less the seeding of a new counter).
	rawFencedAcquire = redis.NewScript(`if redis.call("set", KEYS[1], ARGV[1], "NX", "PX", ARGV[2]) then return redis.call("incr", KEYS[2]) end return 0`)
	// rawFencedRelease adds dlock's queue check to rawRelease (dlock's
	// release.lua when nobody waits).
	rawFencedRelease = redis.NewScript(`if redis.call("exists", KEYS[2]) == 0 then if redis.call("get", KEYS[1]) == ARGV[1] then redis.call("del", KEYS[1]) return 1 end return 0 end return -1`)
)

// rawScripted is the raw loop with its SET sent in a script too.
type rawScripted struct {
	*raw
	name             string
	acquire, release *redis.Script
	fenced           bool // the scripts also take the counter's and the queue's keys
	deadline         bool // Acquire bounds a ctx without deadline, as bsm/redislock's Obtain does
}

func newRawLua(e *Env) (Impl, error) { return newRawScripted(e, RawLua, false, false), nil }

func newRawFenced(e *Env) (Impl, error) { return newRawScripted(e, RawFenced, true, false), nil }

func newRawLuaDeadline(e *Env) (Impl, error) {
	return newRawScripted(e, RawLuaDeadline, false, true), nil
}

func newRawScripted(e *Env, name string, fenced, deadline bool) *rawScripted {
	r := &rawScripted{raw: &raw{c: NewClient(e.Shared), ttlMS: strconv.FormatInt(TTL.Milliseconds(), 10)},
		name: name, acquire: rawLuaAcquire, release: rawRelease, fenced: fenced, deadline: deadline}
	if fenced {
		r.acquire, r.release = rawFencedAcquire, rawFencedRelease
	}
	return r
}

type rawScriptedHeld struct {
	r    *rawScripted
	keys []string // the release's
	val  string
}

func (r *rawScripted) Acquire(ctx context.Context, key string) (Held, error) {
	// Both loops build every key, so that their client work is the same:
	// the acquire's are keys[:2], the release's keys[2:].
	keys := []string{key, key + ":fence", key, key + ":queue"}
	acq, rel := keys[:1], keys[2:3]
	if r.fenced {
		acq, rel = keys[:2], keys[2:]
	}
	val := ownerValue()
	if _, ok := ctx.Deadline(); r.deadline && !ok {
		// bsm/redislock's Obtain: a context.WithDeadline, and so a
		// timer, on every call whose context has no deadline.
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, time.Now().Add(TTL))
		defer cancel()
	}
	return poll(ctx, func() (Held, error) {
		got, err := r.acquire.Run(ctx, r.c, acq, val, r.ttlMS).Int64()
		switch {
		case err != nil:
			return nil, err
		case got == 0:
			return nil, errHeld
		}
		return &rawScriptedHeld{r: r, keys: rel, val: val}, nil
	})
}

func (h *rawScriptedHeld) Release(ctx context.Context) error {
	n, err := h.r.release.Run(ctx, h.r.c, h.keys, h.val).Int()
	if err != nil {
		return err
	}
	if n != 1 {
		return fmt.Errorf("%s: lock not held at release (%d)", h.r.name, n)
	}
	return nil
}
