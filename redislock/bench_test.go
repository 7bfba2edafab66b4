package redislock

import (
	"context"
	"testing"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/locktest"
)

// BenchmarkAcquireRelease: one goroutine, one name, no contention, through
// a Locker (as users call it).
func BenchmarkAcquireRelease(b *testing.B) {
	l := newLocker(b, newDriver(b, nil))
	locktest.BenchCycle(b, context.Background(), locktest.Kind(l, "mutex", "bench/one"))
}

// BenchmarkDriverLockUnlock: the driver alone, the cost this package adds
// to go-redis.
func BenchmarkDriverLockUnlock(b *testing.B) {
	benchDriver(b, newDriver(b, nil), request("bench/driver", 30*time.Second))
}

// benchDriver measures Lock and Unlock of r on the driver d alone.
func benchDriver(b *testing.B, d *Driver, r driver.Request) {
	ctx := context.Background()
	locktest.BenchLoop(b, func() error {
		if _, err := d.Lock(ctx, r); err != nil {
			return err
		}
		return d.Unlock(ctx, r)
	})
}

// BenchmarkParallelDistinct: every goroutine acquires and releases a name
// of its own.
func BenchmarkParallelDistinct(b *testing.B) {
	l := newLocker(b, newDriver(b, nil))
	ctx := context.Background()
	locktest.BenchParallel(b, 0, "bench/distinct/", func(name string) error { return locktest.Cycle(ctx, l, name) })
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

// BenchmarkKinds: acquire and release of one lock of a kind, with no
// contention, through a Locker (as users call it); mutex for comparison.
func BenchmarkKinds(b *testing.B) {
	l := newLocker(b, newDriver(b, nil))
	locktest.BenchKinds(b, func(*testing.B) *dlock.Locker { return l }, "bench", "read", "write", "permit", "campaign", "mutex")
}

// BenchmarkDriverKinds: Lock and Unlock of the driver alone, per mode.
func BenchmarkDriverKinds(b *testing.B) {
	d := newDriver(b, nil)
	for _, m := range []driver.Mode{driver.Exclusive, driver.Read, driver.Write, driver.Permit, driver.Leader} {
		b.Run(m.String(), func(b *testing.B) { benchDriver(b, d, kindRequest(m, "bench/driver", 30*time.Second)) })
	}
}

// BenchmarkReplica: acquire+release through a Locker on a primary with one
// replica of the benchmark's own, on loopback, from one goroutine (S1) and
// from 16 on names of their own (S2): "default" waits for the replica's
// acknowledgement of each grant (WAIT), "off" does not (WaitReplicas -1,
// URL wait_replicas=0). The difference is what the default costs where
// there are replicas.
func BenchmarkReplica(b *testing.B) {
	primary := testenv.StartRedis(b, testenv.RedisOptions{})
	startReplica(b, primary)
	ctx := context.Background()
	for _, sc := range []string{"S1", "S2"} {
		for _, c := range []struct {
			name string
			wait int
		}{{"default", 0}, {"off", -1}} {
			b.Run(sc+"/"+c.name, func(b *testing.B) {
				d := newDriverOn(b, primary.Client(), &Options{WaitReplicas: c.wait})
				l := locktest.New(b, d)
				if sc == "S1" {
					locktest.BenchCycle(b, ctx, locktest.Kind(l, "mutex", "bench/replica"))
				} else {
					locktest.BenchParallel(b, 16, "bench/replica/", func(name string) error { return locktest.Cycle(ctx, l, name) })
				}
				if want := int64(1 + c.wait); d.waitReplicas.Load() != want {
					b.Fatalf("waited for %d replicas, want %d", d.waitReplicas.Load(), want)
				}
			})
		}
	}
}
