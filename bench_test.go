package dlock_test

import (
	"context"
	"testing"

	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/memlock"
)

// BenchmarkAcquireRelease measures what the Locker itself costs per
// acquire+release (validation, owner value, lease, supervision timer,
// metrics) over the in-process memlock driver, whose own work is a map
// operation under a mutex.
func BenchmarkAcquireRelease(b *testing.B) {
	l := newMem(b, memlock.NewStore())
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		lease, err := l.Acquire(ctx, "bench")
		if err != nil {
			b.Fatal(err)
		}
		if err := lease.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLeaseErr measures the look a careful holder takes before each
// write: a clock read and a comparison.
func BenchmarkLeaseErr(b *testing.B) {
	ctx := context.Background()
	for _, bc := range []struct {
		name string
		d    driver.Driver
	}{{"ttl", memlock.NewStore().Driver()}, {"check", &checking{Driver: memlock.NewStore().Driver()}}} {
		b.Run(bc.name, func(b *testing.B) {
			l := newLocker(b, bc.d)
			lease, err := l.TryAcquire(ctx, "job")
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if lease.Err() != nil {
					b.Fatal("lost")
				}
			}
		})
	}
}

// BenchmarkLeaseContextErr measures the same look through Lease.Context.
func BenchmarkLeaseContextErr(b *testing.B) {
	ctx := context.Background()
	l := newMem(b, memlock.NewStore())
	lease, err := l.TryAcquire(ctx, "job")
	if err != nil {
		b.Fatal(err)
	}
	work, cancel := lease.Context(ctx)
	defer cancel()
	b.ReportAllocs()
	for b.Loop() {
		if work.Err() != nil {
			b.Fatal("lost")
		}
	}
}
