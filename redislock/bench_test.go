package redislock

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockgo/dlock"
)

// BenchmarkAcquireRelease: one goroutine, one name, no contention, through
// a Locker (as users call it).
func BenchmarkAcquireRelease(b *testing.B) {
	d := newDriver(b, nil)
	l := newLocker(b, d)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		lease, err := l.Acquire(ctx, "bench/one")
		if err != nil {
			b.Fatal(err)
		}
		if err := lease.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDriverLockUnlock: the driver alone, the cost this package adds
// to go-redis.
func BenchmarkDriverLockUnlock(b *testing.B) {
	d := newDriver(b, nil)
	ctx := context.Background()
	r := request("bench/driver", 30*time.Second)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := d.Lock(ctx, r); err != nil {
			b.Fatal(err)
		}
		if err := d.Unlock(ctx, r); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParallelDistinct: every goroutine acquires and releases a name
// of its own.
func BenchmarkParallelDistinct(b *testing.B) {
	d := newDriver(b, nil)
	l := newLocker(b, d)
	ctx := context.Background()
	var next atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		name := "bench/distinct/" + strconv.FormatInt(next.Add(1), 10)
		for pb.Next() {
			lease, err := l.Acquire(ctx, name)
			if err != nil {
				b.Error(err)
				return
			}
			if err := lease.Release(ctx); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkContended: 8 goroutines take turns on one name, each with its
// own Locker (lockers=8: its own subscription, as separate processes would
// have) or all sharing one (lockers=1). ns/op is the time per
// acquisition; max-wait-ms is the longest any one Acquire waited;
// other-waiter-% is the share of acquisitions by a different goroutine
// than the previous holder (a handoff, not a re-grab).
func BenchmarkContended(b *testing.B) {
	for _, shared := range []bool{false, true} {
		b.Run(map[bool]string{false: "lockers=8", true: "lockers=1"}[shared], func(b *testing.B) {
			d := newDriver(b, nil)
			lockers := make([]*dlock.Locker, 8)
			for i := range lockers {
				if shared && i > 0 {
					lockers[i] = lockers[0]
				} else {
					lockers[i] = newLocker(b, d)
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			st := contend(b, lockers, "bench/contended", b.N)
			b.StopTimer()
			b.ReportMetric(float64(st.max)/float64(time.Millisecond), "max-wait-ms")
			b.ReportMetric(float64(st.pct(99))/float64(time.Millisecond), "p99-wait-ms")
			b.ReportMetric(st.otherPct(), "other-waiter-%")
			b.ReportMetric(float64(st.n)/st.elapsed.Seconds(), "acquires/s")
		})
	}
}
