package redislock

import (
	"context"
	"testing"
	"time"

	"github.com/dlockgo/dlock/driver"
)

// benchKind: acquire and release of one lock of a kind, with no
// contention, through a Locker (as users call it).
func benchKind(b *testing.B, acquire func(ctx context.Context) (interface{ Release(context.Context) error }, error)) {
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		lease, err := acquire(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if err := lease.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkKinds(b *testing.B) {
	d := newDriver(b, nil)
	l := newLocker(b, d)
	b.Run("read", func(b *testing.B) {
		benchKind(b, func(ctx context.Context) (interface{ Release(context.Context) error }, error) {
			return l.AcquireRead(ctx, "bench/rw")
		})
	})
	b.Run("write", func(b *testing.B) {
		benchKind(b, func(ctx context.Context) (interface{ Release(context.Context) error }, error) {
			return l.AcquireWrite(ctx, "bench/rw")
		})
	})
	b.Run("permit", func(b *testing.B) {
		benchKind(b, func(ctx context.Context) (interface{ Release(context.Context) error }, error) {
			return l.AcquirePermit(ctx, "bench/sem", 4)
		})
	})
	b.Run("campaign", func(b *testing.B) {
		benchKind(b, func(ctx context.Context) (interface{ Release(context.Context) error }, error) {
			return l.Campaign(ctx, "bench/election", "node-1")
		})
	})
	b.Run("mutex", func(b *testing.B) { // for comparison
		benchKind(b, func(ctx context.Context) (interface{ Release(context.Context) error }, error) {
			return l.Acquire(ctx, "bench/mutex")
		})
	})
}

// BenchmarkDriverKinds: Lock and Unlock of the driver alone, per mode.
func BenchmarkDriverKinds(b *testing.B) {
	d := newDriver(b, nil)
	ctx := context.Background()
	for _, m := range []driver.Mode{driver.Exclusive, driver.Read, driver.Write, driver.Permit, driver.Leader} {
		b.Run(m.String(), func(b *testing.B) {
			r := kindRequest(m, "bench/driver", 30*time.Second)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := d.Lock(ctx, r); err != nil {
					b.Fatal(err)
				}
				if err := d.Unlock(ctx, r); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
