package redislock

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/internal/testenv"
)

// TestAutoPipeliner: a Locker over go-redis's auto-pipelining client (the
// way to coalesce calls, see Requests in the package documentation)
// acquires, releases, refuses a held lock and hands it on under
// contention, with one holder at a time.
func TestAutoPipeliner(t *testing.T) {
	c := testenv.RedisClient(t)
	ap, err := c.AutoPipeline()
	if err != nil {
		t.Fatal(err)
	}
	var _ redis.UniversalClient = ap
	d := newDriverOn(t, ap, nil)
	l, err := dlock.New(d, dlock.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	ctx := ctxTimeout(t, 30*time.Second)

	lease, err := l.Acquire(ctx, "ap")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.TryAcquire(ctx, "ap"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("TryAcquire of a held lock: %v, want ErrNotAcquired", err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// Contention: 16 goroutines, 10 turns each, on one name.
	var inside, turns atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for range 10 {
				lease, err := l.Acquire(ctx, "ap/contended")
				if err != nil {
					t.Error(err)
					return
				}
				if inside.Add(1) != 1 {
					t.Error("two holders at once")
				}
				turns.Add(1)
				inside.Add(-1)
				if err := lease.Release(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if turns.Load() != 160 {
		t.Errorf("%d turns, want 160", turns.Load())
	}
}
