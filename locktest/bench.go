package locktest

import (
	"context"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/dlockgo/dlock"
)

// The bodies of the backends' benchmarks. Each backend's bench_test.go
// keeps its benchmarks' names (docs cite them) and its set-up, and runs
// the loop here: one acquire and its release per op, through a
// dlock.Locker or, for comparison, another client's lock.

// Held is a lock a benchmark holds: a *dlock.Lease, or another client's
// lock that a backend wraps to compare with.
type Held interface{ Release(context.Context) error }

// Kind returns the take of name on l as a lock of kind: a sub-benchmark's
// name, whose lower case starts with "read", "write", "permit" (one of 4),
// "campaign" or anything else for the mutex ("Read", "permit4").
func Kind(l *dlock.Locker, kind, name string) func(context.Context) (Held, error) {
	switch k := strings.ToLower(kind); {
	case strings.HasPrefix(k, "read"):
		return func(ctx context.Context) (Held, error) { return l.AcquireRead(ctx, name) }
	case strings.HasPrefix(k, "write"):
		return func(ctx context.Context) (Held, error) { return l.AcquireWrite(ctx, name) }
	case strings.HasPrefix(k, "permit"):
		return func(ctx context.Context) (Held, error) { return l.AcquirePermit(ctx, name, 4) }
	case strings.HasPrefix(k, "campaign"):
		return func(ctx context.Context) (Held, error) { return l.Campaign(ctx, name, "bench") }
	}
	return func(ctx context.Context) (Held, error) { return l.Acquire(ctx, name) }
}

// Cycle acquires name on l and releases it.
func Cycle(ctx context.Context, l *dlock.Locker, name string) error {
	lease, err := l.Acquire(ctx, name)
	if err != nil {
		return err
	}
	return lease.Release(ctx)
}

// Warm acquires and releases name on l once, or fails b: what a
// benchmark's timer should not see (a first connection, a session, a
// table's creation).
func Warm(b testing.TB, l *dlock.Locker, name string) {
	b.Helper()
	if err := Cycle(context.Background(), l, name); err != nil {
		b.Fatal(err)
	}
}

// BenchLoop measures op, one call per op (b.Loop), with its allocations;
// an error fails b.
func BenchLoop(b *testing.B, op func() error) {
	b.ReportAllocs()
	for b.Loop() {
		if err := op(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchCycle measures take and the release of what it took, after one
// such pair outside the timer.
func BenchCycle(b *testing.B, ctx context.Context, take func(context.Context) (Held, error)) {
	cycle := func() error {
		h, err := take(ctx)
		if err != nil {
			return err
		}
		return h.Release(ctx)
	}
	if err := cycle(); err != nil {
		b.Fatal(err)
	}
	BenchLoop(b, cycle)
}

// BenchKinds runs BenchCycle of each kind (see Kind) as a sub-benchmark of
// that name, on the name name/kind of the Locker that locker returns for
// the sub-benchmark.
func BenchKinds(b *testing.B, locker func(b *testing.B) *dlock.Locker, name string, kinds ...string) {
	for _, k := range kinds {
		b.Run(k, func(b *testing.B) {
			BenchCycle(b, context.Background(), Kind(locker(b), k, name+"/"+k))
		})
	}
}

// BenchParallel measures op in b.RunParallel's goroutines, goroutines of
// them (rounded up to a multiple of GOMAXPROCS; 0: one per GOMAXPROCS),
// each calling op with a name of its own: prefix and its number.
func BenchParallel(b *testing.B, goroutines int, prefix string, op func(name string) error) {
	if goroutines > 0 {
		procs := runtime.GOMAXPROCS(0)
		b.SetParallelism((goroutines + procs - 1) / procs)
	}
	var next atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		name := prefix + strconv.FormatInt(next.Add(1), 10)
		for pb.Next() {
			if err := op(name); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// Acquirers is the take of BenchContend by which goroutine g acquires name
// on lockers[g%len(lockers)].
func Acquirers(lockers []*dlock.Locker, name string) func(ctx context.Context, g int) (Held, error) {
	return func(ctx context.Context, g int) (Held, error) { return lockers[g%len(lockers)].Acquire(ctx, name) }
}

// BenchContend measures goroutines goroutines that contend for one lock:
// they take it b.N times in all, goroutine g with take(ctx, g), and
// release it at once; ns/op is the wall time per acquisition. It fails b
// if two hold the lock at once, and returns the number of handoffs: the
// acquisitions by another goroutine than the one that held the lock last.
func BenchContend(b *testing.B, ctx context.Context, goroutines int, take func(ctx context.Context, g int) (Held, error)) (handoffs int) {
	var (
		left, moved, last atomic.Int64
		holders           atomic.Int32
		wg                sync.WaitGroup
	)
	left.Store(int64(b.N))
	last.Store(-1)
	b.ReportAllocs()
	b.ResetTimer()
	for g := range goroutines {
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				h, err := take(ctx, g)
				if err != nil {
					b.Error(err)
					return
				}
				if holders.Add(1) != 1 {
					b.Error("two holders at once")
				}
				if prev := last.Swap(int64(g)); prev != -1 && prev != int64(g) {
					moved.Add(1)
				}
				holders.Add(-1)
				if err := h.Release(ctx); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return int(moved.Load())
}
