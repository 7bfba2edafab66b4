package natslock_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/locktest"
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
	locktest.BenchCycle(b, context.Background(), locktest.Kind(newLocker(b, c, o), "mutex", "bench/u"))
}

// BenchmarkAcquireReleaseParallel: 16 goroutines, each on a name of its
// own, over one Locker.
func BenchmarkAcquireReleaseParallel(b *testing.B) {
	c, o := natsBench(b)
	l := newLocker(b, c, o)
	ctx := context.Background()
	locktest.BenchParallel(b, 16, "bench/p", func(name string) error { return locktest.Cycle(ctx, l, name) })
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
	locktest.BenchLoop(b, func() error {
		if _, err := l.TryAcquire(ctx, "bench/held"); err == nil {
			return errors.New("TryAcquire of a held lock succeeded")
		}
		return nil
	})
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
	moved := locktest.BenchContend(b, context.Background(), 8, locktest.Acquirers(lockers, "bench/c"))
	b.ReportMetric(100*float64(moved)/float64(b.N), "handoff-%")
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
	locktest.BenchLoop(b, func() error { return kvCreateDelete(ctx, kv, "floor") })
}

// kvCreateDelete creates key with a per-key TTL and deletes it, naming its
// revision.
func kvCreateDelete(ctx context.Context, kv jetstream.KeyValue, key string) error {
	rev, err := kv.Create(ctx, key, []byte("owner"), jetstream.KeyTTL(30*time.Second))
	if err != nil {
		return err
	}
	return kv.Delete(ctx, key, jetstream.LastRevision(rev))
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
	locktest.BenchLoop(b, func() error {
		i++
		return kvCreateDelete(ctx, kv, "floor"+strconv.Itoa(i))
	})
}
