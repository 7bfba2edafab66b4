package filelock_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/filelock"
)

// BenchmarkUncontended: Acquire and Release of one free lock.
func BenchmarkUncontended(b *testing.B) {
	ctx := context.Background()
	l, _ := newLocker(b, b.TempDir())
	b.ReportAllocs()
	for b.Loop() {
		lease, err := l.Acquire(ctx, "bench/uncontended")
		if err != nil {
			b.Fatal(err)
		}
		if err := lease.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDriverUncontended: the driver alone, TryLock and Unlock of one
// free lock — the system calls, without the Locker's lease bookkeeping.
func BenchmarkDriverUncontended(b *testing.B) {
	ctx := context.Background()
	d, err := filelock.NewDriver(b.TempDir(), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	r := driver.Request{Name: "bench/driver", Owner: "0123456789abcdef0123456789abcdef", TTL: time.Minute}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := d.TryLock(ctx, r); err != nil {
			b.Fatal(err)
		}
		if err := d.Unlock(ctx, r); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDistinctNames: 16 goroutines of one Locker, each on its own
// lock.
func BenchmarkDistinctNames(b *testing.B) {
	const names = 16
	ctx := context.Background()
	l, _ := newLocker(b, b.TempDir())
	var next atomic.Int32
	b.SetParallelism((names + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		name := fmt.Sprintf("bench/distinct/%d", next.Add(1)%names)
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

// BenchmarkContended: 8 goroutines, each with its own Locker (as 8 clients
// would be), contend for one lock; each release is a chance for a hand-over to another client (handoffs/op says how often
// the lock did change hands: waiters are not served in order, and the
// client that just released may take the lock again). ns/op is the time
// per acquisition.
func BenchmarkContended(b *testing.B) {
	const contenders = 8
	ctx := context.Background()
	dir := b.TempDir()
	lockers := make([]*dlock.Locker, contenders)
	for i := range lockers {
		lockers[i], _ = newLocker(b, dir)
	}
	var left, handoffs atomic.Int64
	var last atomic.Int32 // the client that held the lock last, under the lock
	left.Store(int64(b.N))
	b.ReportAllocs()
	b.ResetTimer()
	var wg sync.WaitGroup
	for i, l := range lockers {
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				lease, err := l.Acquire(ctx, "bench/contended")
				if err != nil {
					b.Error(err)
					return
				}
				if last.Swap(int32(i)) != int32(i) {
					handoffs.Add(1)
				}
				if err := lease.Release(ctx); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.ReportMetric(float64(handoffs.Load())/float64(b.N), "handoffs/op")
}

// BenchmarkRW: acquire+release of the readers-writer lock through a
// Locker, uncontended.
func BenchmarkRW(b *testing.B) {
	ctx := context.Background()
	for _, write := range []bool{false, true} {
		mode := "read"
		if write {
			mode = "write"
		}
		b.Run(mode, func(b *testing.B) {
			l, _ := newLocker(b, b.TempDir())
			cycle := func() {
				var lease *dlock.Lease
				var err error
				if write {
					lease, err = l.AcquireWrite(ctx, "bench")
				} else {
					lease, err = l.AcquireRead(ctx, "bench")
				}
				if err != nil {
					b.Fatal(err)
				}
				if err := lease.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
			cycle()
			b.ReportAllocs()
			for b.Loop() {
				cycle()
			}
		})
	}
}
