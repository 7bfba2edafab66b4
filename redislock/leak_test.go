package redislock

import (
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/locktest"
)

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
		a, err := dlock.Open(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		b, err := dlock.Open(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
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
