package natslock_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/natslock"
)

// The benchmarks run against one nats-server of their own (file storage,
// the default). ns/op is the time per acquire+release; for Contended8 it
// is wall time per acquisition with 8 contenders on one name, so 1e9/ns is
// the handoff rate. The Floor benchmarks are the same work done with
// nats.go's KV API directly, without tokens, renewal or waiting: the
// least two round trips can cost.

// natsBench starts the server and a bucket for a benchmark.
func natsBench(b *testing.B) (*testenv.NATSCluster, *natslock.Options) {
	c := testenv.StartNATS(b, 1)
	return c, &natslock.Options{Bucket: randomBucket()}
}

func BenchmarkAcquireRelease(b *testing.B) {
	c, o := natsBench(b)
	l := newLocker(b, c, o)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		lease, err := l.Acquire(ctx, "bench/u")
		if err != nil {
			b.Fatal(err)
		}
		if err := lease.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAcquireReleaseParallel: 16 goroutines, each on a name of its
// own, over one Locker.
func BenchmarkAcquireReleaseParallel(b *testing.B) {
	c, o := natsBench(b)
	l := newLocker(b, c, o)
	ctx := context.Background()
	var n atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(8) // 16 goroutines on 2 CPUs
	b.RunParallel(func(pb *testing.PB) {
		name := "bench/p" + strconv.FormatInt(n.Add(1), 10)
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

// BenchmarkTryAcquireHeld is a failed attempt on a held lock: a write the
// server refuses and a read of the holder.
func BenchmarkTryAcquireHeld(b *testing.B) {
	c, o := natsBench(b)
	holder, l := newLocker(b, c, o), newLocker(b, c, o)
	ctx := context.Background()
	lease, err := holder.Acquire(ctx, "bench/held")
	if err != nil {
		b.Fatal(err)
	}
	defer lease.Release(ctx)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := l.TryAcquire(ctx, "bench/held"); err == nil {
			b.Fatal("TryAcquire of a held lock succeeded")
		}
	}
}

// BenchmarkContended8: 8 goroutines over 4 Lockers take one name in turn.
// It reports the share of acquisitions that went to another goroutine
// than the last holder (handoff-%): there is no queue, and the releaser,
// which knows its own marker's revision, may take the lock straight back.
func BenchmarkContended8(b *testing.B) {
	c, o := natsBench(b)
	lockers := make([]*dlock.Locker, 4)
	for i := range lockers {
		lockers[i] = newLocker(b, c, o)
	}
	ctx := context.Background()
	var left, last, moved atomic.Int64
	left.Store(int64(b.N))
	last.Store(-1)
	b.ReportAllocs()
	b.ResetTimer()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			l := lockers[g%len(lockers)]
			for left.Add(-1) >= 0 {
				lease, err := l.Acquire(ctx, "bench/c")
				if err != nil {
					b.Error(err)
					return
				}
				if last.Swap(int64(g)) != int64(g) {
					moved.Add(1)
				}
				if err := lease.Release(ctx); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.ReportMetric(100*float64(moved.Load())/float64(b.N), "handoff-%")
}

// BenchmarkFloorKVCreateDelete is nats.go's KV API on one key as a user
// would write a lock with it: Create with a per-key TTL, Delete naming
// the revision. After the first Delete the key holds a marker, so each
// Create tries, reads and tries again.
func BenchmarkFloorKVCreateDelete(b *testing.B) {
	c, o := natsBench(b)
	newDriver(b, c, o) // creates the bucket
	kv := admin(b, c, o.Bucket)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		rev, err := kv.Create(ctx, "floor", []byte("owner"), jetstream.KeyTTL(30*time.Second))
		if err != nil {
			b.Fatal(err)
		}
		if err := kv.Delete(ctx, "floor", jetstream.LastRevision(rev)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkFloorKVCreateDeleteFresh is the same on a new key each time,
// which Create takes in one round trip: two round trips per iteration,
// the floor.
func BenchmarkFloorKVCreateDeleteFresh(b *testing.B) {
	c, o := natsBench(b)
	newDriver(b, c, o)
	kv := admin(b, c, o.Bucket)
	ctx := context.Background()
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		i++
		key := "floor" + strconv.Itoa(i)
		rev, err := kv.Create(ctx, key, []byte("owner"), jetstream.KeyTTL(30*time.Second))
		if err != nil {
			b.Fatal(err)
		}
		if err := kv.Delete(ctx, key, jetstream.LastRevision(rev)); err != nil {
			b.Fatal(err)
		}
	}
}
