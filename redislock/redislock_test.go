package redislock

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/locktest"
)

// TestConformance runs dlock's conformance suite against the shared Redis.
// Every Locker has a client of its own, as separate processes would.
func TestConformance(t *testing.T) {
	addr := testenv.RedisAddr(t)
	admin := testenv.RedisClient(t)
	prefix := testPrefix(t, admin)
	locktest.Run(t, locktest.Harness{
		NewLocker: func(t *testing.T, opts ...dlock.Option) *dlock.Locker {
			c := redis.NewClient(&redis.Options{Addr: addr})
			t.Cleanup(func() { _ = c.Close() }) // after the suite closes the Locker
			l, err := New(c, &Options{Prefix: prefix}, opts...)
			if err != nil {
				t.Fatal(err)
			}
			return l
		},
		TakeAway: func(t *testing.T, name string) {
			if err := admin.Del(t.Context(), prefix+"{"+name+"}").Err(); err != nil {
				t.Fatal(err)
			}
		},
		TTL: 500 * time.Millisecond,
	})
}
