package interop

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	bsm "github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock"
)

// dlock in layout=redsync against the real redsync and bsm/redislock on
// the shared Redis (DLOCK_REDIS_ADDR, default 127.0.0.1:6379; a missing
// server fails every test). The peers' key is the prefix and dlock's lock
// name: "<prefix>x" is dlock's lock "x" under that prefix.

// pttl returns key's remaining TTL, failing t on an error.
func pttl(t *testing.T, c *redis.Client, key string) time.Duration {
	t.Helper()
	d, err := c.PTTL(t.Context(), key).Result()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// checkTTL fails t unless key holds want and has at most ttl left, and
// most of it.
func checkTTL(t *testing.T, c *redis.Client, key, want string, ttl time.Duration) {
	t.Helper()
	if v := c.Get(t.Context(), key).Val(); v != want {
		t.Errorf("%q holds %q, want %q", key, v, want)
	}
	if left := pttl(t, c, key); left > ttl || left < ttl-ttl/4 {
		t.Errorf("%q has %v left, want nearly its %v", key, left, ttl)
	}
}

// redisCase starts a subtest: a context bounded to 30s, a key prefix of
// its own, an admin client and a client of the peer.
func redisCase(t *testing.T, newPeer func(testing.TB) peer) (context.Context, string, *redis.Client, peer) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx, redisPrefix(t), newRedisClient(t), newPeer(t)
}

// releasePeer releases the peer's pl, which it holds, or fails t.
func releasePeer(t *testing.T, ctx context.Context, name string, pl peerLock) {
	t.Helper()
	if ok, err := pl.release(ctx); !ok || err != nil {
		t.Errorf("%s release: %v, %v", name, ok, err)
	}
}

// releaseLease releases dlock's lease, which it holds, or fails t.
func releaseLease(t *testing.T, ctx context.Context, lease *dlock.Lease) {
	t.Helper()
	if err := lease.Release(ctx); err != nil {
		t.Errorf("dlock release: %v", err)
	}
}

// checkTakeOver fails t unless who, just now, took the lock that a
// crashed holder of the side crashed had taken at taken for ttl: once its
// TTL had run out (taken is before the crashed holder's request, so
// nothing but a scheduler's delay of that request shortens the wait), and
// within a hang bound of 10× the TTL.
func checkTakeOver(t *testing.T, who, crashed string, taken time.Time, ttl time.Duration) {
	t.Helper()
	waited := time.Since(taken)
	t.Logf("%s took the crashed %s holder's lock %v after it was taken (TTL %v)", who, crashed, waited, ttl)
	if waited < ttl-50*time.Millisecond || waited > 10*ttl {
		t.Errorf("%s took the lock %v after the %s holder took it, with TTL %v", who, waited, crashed, ttl)
	}
}

// think pauses between two rounds of a holder, so that the lock is often
// free and both sides get it.
func think(max time.Duration) { time.Sleep(rand.N(max)) }

// TestRedisMutualExclusion: several dlock Lockers and several clients of
// the peer contend for one lock for many rounds; no two ever hold it at
// once, both sides get it, turn about, and dlock's tokens increase in
// the order of its grants.
func TestRedisMutualExclusion(t *testing.T) {
	for name, newPeer := range peers(t) {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 120*time.Second)
			defer cancel()
			prefix := redisPrefix(t)
			res := newResource(t)
			const perSide, rounds, ttl = 3, 20, 5 * time.Second
			var (
				wg     sync.WaitGroup
				mu     sync.Mutex
				tokens []uint64
			)
			hold := func() { time.Sleep(2*time.Millisecond + rand.N(3*time.Millisecond)) }
			for range perSide {
				l := newDlock(t, prefix, dlock.WithTTL(ttl))
				wg.Go(func() {
					for range rounds {
						think(100 * time.Millisecond)
						lease, err := l.Acquire(ctx, "excl")
						if err != nil {
							t.Errorf("dlock: %v", err)
							return
						}
						res.enter("dlock")
						mu.Lock()
						tokens = append(tokens, lease.Token())
						mu.Unlock()
						hold()
						res.exit()
						if err := lease.Release(ctx); err != nil {
							t.Errorf("dlock release: %v", err)
						}
					}
				})
				p := newPeer(t)
				wg.Go(func() {
					for range rounds {
						think(100 * time.Millisecond)
						pl, err := p.acquire(ctx, prefix+"excl", ttl)
						if err != nil {
							t.Errorf("%s: %v", name, err)
							return
						}
						res.enter(name)
						hold()
						res.exit()
						releasePeer(t, ctx, name, pl)
					}
				})
			}
			wg.Wait()
			res.check(t, 2*perSide*rounds)
			entries := res.entries()
			turns := 0
			for i := 1; i < len(entries); i++ {
				if entries[i] != entries[i-1] {
					turns++
				}
			}
			t.Logf("%d entries, %d turns from one side to the other", len(entries), turns)
			if turns < 4 {
				t.Errorf("the lock went from one side to the other %d times: the sides hardly contended", turns)
			}
			for i := 1; i < len(tokens); i++ {
				if tokens[i] <= tokens[i-1] {
					t.Errorf("dlock grant %d: token %d after %d", i, tokens[i], tokens[i-1])
				}
			}
		})
	}
}

// TestRedisCrashedHolder: a holder of either side that stops renewing and
// never releases frees the lock for the other side once its TTL has run
// out, not before; a holder that renews keeps the other side out for three
// times its TTL (renewing every third of a TTL of 1s, so that it stands a
// stall of two thirds of a second of its renewals on a loaded machine).
// The key carries the TTL each side asked for.
func TestRedisCrashedHolder(t *testing.T) {
	const ttl = time.Second
	for name, newPeer := range peers(t) {
		t.Run(name+"/PeerCrashes", func(t *testing.T) {
			ctx, prefix, c, p := redisCase(t, newPeer)
			l := newDlock(t, prefix)
			taken := time.Now()
			pl, err := p.acquire(ctx, prefix+"crash", ttl) // abandoned
			if err != nil {
				t.Fatal(err)
			}
			checkTTL(t, c, prefix+"crash", pl.value(), ttl)
			lease, err := l.Acquire(ctx, "crash")
			if err != nil {
				t.Fatal(err)
			}
			checkTakeOver(t, "dlock", name, taken, ttl)
			releaseLease(t, ctx, lease)
		})
		t.Run(name+"/DlockCrashes", func(t *testing.T) {
			ctx, prefix, c, p := redisCase(t, newPeer)
			l := newDlock(t, prefix, dlock.WithTTL(ttl), dlock.WithAutoRenew(false))
			taken := time.Now()
			lease, err := l.TryAcquire(ctx, "crash") // abandoned
			if err != nil {
				t.Fatal(err)
			}
			checkTTL(t, c, prefix+"crash", c.Get(ctx, prefix+"crash").Val(), ttl)
			pl, err := p.acquire(ctx, prefix+"crash", ttl)
			if err != nil {
				t.Fatal(err)
			}
			checkTakeOver(t, name, "dlock", taken, ttl)
			if !errors.Is(lease.Err(), dlock.ErrLost) {
				t.Errorf("the crashed dlock lease: Err() = %v, want ErrLost", lease.Err())
			}
			releasePeer(t, ctx, name, pl)
		})
		t.Run(name+"/RenewingDlockKeepsIt", func(t *testing.T) {
			ctx, prefix, _, p := redisCase(t, newPeer)
			l := newDlock(t, prefix, dlock.WithTTL(ttl))
			lease, err := l.TryAcquire(ctx, "renew")
			if err != nil {
				t.Fatal(err)
			}
			wctx, wcancel := context.WithTimeout(ctx, 3*ttl)
			defer wcancel()
			if pl, err := p.acquire(wctx, prefix+"renew", ttl); err == nil {
				t.Errorf("%s took a lock dlock renews (value %q)", name, pl.value())
			}
			if err := lease.Err(); err != nil {
				t.Errorf("the renewed lease: %v", err)
			}
			releaseLease(t, ctx, lease)
		})
		t.Run(name+"/RenewingPeerKeepsIt", func(t *testing.T) {
			ctx, prefix, _, p := redisCase(t, newPeer)
			const short = ttl
			l := newDlock(t, prefix)
			pl, err := p.acquire(ctx, prefix+"renew", short)
			if err != nil {
				t.Fatal(err)
			}
			stop := make(chan struct{})
			var wg sync.WaitGroup
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					case <-time.After(short / 3):
					}
					if ok, err := pl.renew(ctx, short); !ok || err != nil {
						t.Errorf("%s renew of its own lock: %v, %v", name, ok, err)
						return
					}
				}
			})
			wctx, wcancel := context.WithTimeout(ctx, 3*short)
			defer wcancel()
			_, err = l.Acquire(wctx, "renew")
			close(stop)
			wg.Wait()
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("dlock's Acquire of a lock %s renews: %v, want the deadline's error", name, err)
			}
			releasePeer(t, ctx, name, pl)
		})
	}
}

// TestRedisReleaseNeverRemovesOthers: a release by a holder that lost the
// lock to the other side (a peer's lock that expired, a dlock lease whose
// key was deleted behind its back) leaves the other side's key alone.
func TestRedisReleaseNeverRemovesOthers(t *testing.T) {
	for name, newPeer := range peers(t) {
		t.Run(name+"/PeerReleases", func(t *testing.T) {
			ctx, prefix, c, p := redisCase(t, newPeer)
			l := newDlock(t, prefix)
			pl, err := p.acquire(ctx, prefix+"rel", 200*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			lease, err := l.Acquire(ctx, "rel") // once the peer's lock expired
			if err != nil {
				t.Fatal(err)
			}
			owner := c.Get(ctx, prefix+"rel").Val()
			if ok, err := pl.release(ctx); ok || err != nil {
				t.Errorf("%s released a lock dlock holds: %v, %v", name, ok, err)
			}
			if v := c.Get(ctx, prefix+"rel").Val(); v != owner || v == pl.value() {
				t.Errorf("after the %s release the key holds %q, dlock's value was %q", name, v, owner)
			}
			if err := lease.Err(); err != nil {
				t.Errorf("dlock's lease after the %s release: %v", name, err)
			}
			releaseLease(t, ctx, lease)
		})
		t.Run(name+"/DlockReleases", func(t *testing.T) {
			ctx, prefix, c, p := redisCase(t, newPeer)
			l := newDlock(t, prefix, dlock.WithTTL(10*time.Second))
			lease, err := l.TryAcquire(ctx, "rel")
			if err != nil {
				t.Fatal(err)
			}
			c.Del(ctx, prefix+"rel") // taken away: the lease does not know yet
			pl, ok, err := p.try(ctx, prefix+"rel", 5*time.Second)
			if !ok || err != nil {
				t.Fatalf("%s try on a free lock: %v, %v", name, ok, err)
			}
			if err := lease.Release(ctx); !errors.Is(err, dlock.ErrNotHeld) {
				t.Errorf("dlock's release of a lock %s holds: %v, want ErrNotHeld", name, err)
			}
			checkTTL(t, c, prefix+"rel", pl.value(), 5*time.Second)
			releasePeer(t, ctx, name, pl)
		})
	}
}

// TestRedisRenewNeverRenewsOthers: a renew by a holder that lost the
// lock to the other side fails and leaves the other side's key, and its
// TTL, alone; redsync's extend that takes a free key again (SET NX)
// cannot take dlock's.
func TestRedisRenewNeverRenewsOthers(t *testing.T) {
	const ttl = 2 * time.Second
	for name, newPeer := range peers(t) {
		t.Run(name+"/PeerRenews", func(t *testing.T) {
			ctx, prefix, c, p := redisCase(t, newPeer)
			l := newDlock(t, prefix, dlock.WithTTL(ttl), dlock.WithAutoRenew(false))
			pl, err := p.acquire(ctx, prefix+"ext", 200*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			lease, err := l.Acquire(ctx, "ext")
			if err != nil {
				t.Fatal(err)
			}
			owner := c.Get(ctx, prefix+"ext").Val()
			if ok, err := pl.renew(ctx, time.Minute); ok || err != nil {
				t.Errorf("%s renewed a lock dlock holds: %v, %v", name, ok, err)
			}
			checkTTL(t, c, prefix+"ext", owner, ttl)
			releaseLease(t, ctx, lease)
		})
		t.Run(name+"/DlockRenews", func(t *testing.T) {
			ctx, prefix, c, p := redisCase(t, newPeer)
			l := newDlock(t, prefix, dlock.WithTTL(time.Minute), dlock.WithAutoRenew(false))
			lease, err := l.TryAcquire(ctx, "ext")
			if err != nil {
				t.Fatal(err)
			}
			c.Del(ctx, prefix+"ext") // taken away: the lease does not know yet
			pl, ok, err := p.try(ctx, prefix+"ext", ttl)
			if !ok || err != nil {
				t.Fatalf("%s try on a free lock: %v, %v", name, ok, err)
			}
			if err := lease.Renew(ctx); err == nil {
				t.Errorf("dlock renewed a lock %s holds", name)
			}
			checkTTL(t, c, prefix+"ext", pl.value(), ttl)
			releasePeer(t, ctx, name, pl)
		})
	}
	t.Run("redsync/ExtendWithSetNX", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		prefix, c := redisPrefix(t), newRedisClient(t)
		p := peers(t)["redsync"](t).(redsyncPeer)
		l := newDlock(t, prefix, dlock.WithTTL(ttl), dlock.WithAutoRenew(false))
		m := p.mutex(prefix+"nx", 200*time.Millisecond, 1, redsync.WithSetNXOnExtend())
		if err := m.LockContext(ctx); err != nil {
			t.Fatal(err)
		}
		lease, err := l.Acquire(ctx, "nx")
		if err != nil {
			t.Fatal(err)
		}
		owner := c.Get(ctx, prefix+"nx").Val()
		if ok, _ := m.ExtendContext(ctx); ok {
			t.Error("redsync's extend with SET NX took a lock dlock holds")
		}
		checkTTL(t, c, prefix+"nx", owner, ttl)
		releaseLease(t, ctx, lease)
	})
}

// TestRedisBsmFixedToken: the one peer write that can take a lock dlock
// holds, which docs/INTEROP.md warns of: bsm/redislock's Obtain
// overwrites a key whose value starts with the caller's token, so a
// client with a fixed token of a few hexadecimal digits takes a dlock
// lock whose owner value happens to start with them. With its random
// tokens it does not (TestRedisMutualExclusion).
func TestRedisBsmFixedToken(t *testing.T) {
	ctx, prefix, c, _ := redisCase(t, peers(t)["bsm"])
	l := newDlock(t, prefix, dlock.WithTTL(10*time.Second), dlock.WithAutoRenew(false))
	lease, err := l.TryAcquire(ctx, "fixed")
	if err != nil {
		t.Fatal(err)
	}
	owner := c.Get(ctx, prefix+"fixed").Val()
	lock, err := bsm.New(c).Obtain(ctx, prefix+"fixed", time.Second, &bsm.Options{Token: owner[:4]})
	if err != nil {
		t.Fatalf("bsm/redislock with the token %q did not take the key holding %q: %v; the warning no longer applies", owner[:4], owner, err)
	}
	if v := c.Get(ctx, prefix+"fixed").Val(); v != lock.Token() {
		t.Errorf("the key holds %q after the take-over, want bsm's token %q", v, lock.Token())
	}
	if err := lease.Renew(ctx); err == nil {
		t.Error("dlock renewed a lock bsm/redislock took over")
	}
}
