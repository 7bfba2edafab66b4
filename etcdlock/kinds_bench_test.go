package etcdlock_test

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/locktest"
)

// BenchmarkKinds: one acquire+release per op, uncontended, through a
// dlock.Locker, for each kind of lock besides the mutex (BenchmarkUncontended).
func BenchmarkKinds(b *testing.B) {
	eps := testenv.EtcdEndpoints(b)
	locktest.BenchKinds(b, func(b *testing.B) *dlock.Locker {
		l := newLocker(b, eps, randomPrefix())
		locktest.Warm(b, l, "k") // the session
		return l
	}, "k", "Read", "Write", "Permit", "Campaign")
}

// BenchmarkReadersWithWriter: about 8 goroutines on 8 clients
// take the lock for reading 3 times in 4 and for writing once; ns/op is
// wall time per acquisition.
func BenchmarkReadersWithWriter(b *testing.B) {
	eps := testenv.EtcdEndpoints(b)
	ctx := context.Background()
	prefix := randomPrefix()
	lockers := make([]*dlock.Locker, 8)
	for g := range lockers {
		lockers[g] = newLocker(b, eps, prefix)
		locktest.Warm(b, lockers[g], "rw")
	}
	b.ReportAllocs()
	b.ResetTimer()
	var next atomic.Int64
	b.SetParallelism(max(1, 8/runtime.GOMAXPROCS(0)))
	b.RunParallel(func(pb *testing.PB) {
		g := int(next.Add(1))
		l := lockers[g%len(lockers)]
		for i := 0; pb.Next(); i++ {
			var lease *dlock.Lease
			var err error
			if (g+i)%4 == 0 {
				lease, err = l.AcquireWrite(ctx, "rw")
			} else {
				lease, err = l.AcquireRead(ctx, "rw")
			}
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
