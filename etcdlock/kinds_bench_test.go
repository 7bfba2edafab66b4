package etcdlock_test

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/internal/testenv"
)

// BenchmarkKinds: one acquire+release per op, uncontended, through a
// dlock.Locker, for each kind of lock besides the mutex (BenchmarkUncontended).
func BenchmarkKinds(b *testing.B) {
	eps := testenv.EtcdEndpoints(b)
	ctx := context.Background()
	for _, k := range []struct {
		name    string
		acquire func(l *dlock.Locker) (*dlock.Lease, error)
	}{
		{"Read", func(l *dlock.Locker) (*dlock.Lease, error) { return l.AcquireRead(ctx, "k") }},
		{"Write", func(l *dlock.Locker) (*dlock.Lease, error) { return l.AcquireWrite(ctx, "k") }},
		{"Permit", func(l *dlock.Locker) (*dlock.Lease, error) { return l.AcquirePermit(ctx, "k", 4) }},
		{"Campaign", func(l *dlock.Locker) (*dlock.Lease, error) { return l.Campaign(ctx, "k", "host-1") }},
	} {
		b.Run(k.name, func(b *testing.B) {
			l := newLocker(b, eps, randomPrefix())
			warm(b, l, "k") // the session
			b.ReportAllocs()
			for b.Loop() {
				lease, err := k.acquire(l)
				if err != nil {
					b.Fatal(err)
				}
				if err := lease.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
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
		warm(b, lockers[g], "rw")
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
