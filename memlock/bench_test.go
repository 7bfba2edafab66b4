package memlock_test

import (
	"context"
	"testing"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/memlock"
)

// Uncontended acquire and release through a Locker, per kind of lock:
// the cost of dlock's bookkeeping and memlock's store, with no waiting.
func BenchmarkAcquireRelease(b *testing.B) {
	ctx := context.Background()
	l, err := memlock.New(nil)
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	for _, k := range []struct {
		name    string
		acquire func() (*dlock.Lease, error)
	}{
		{"mutex", func() (*dlock.Lease, error) { return l.Acquire(ctx, "bench/mutex") }},
		{"read", func() (*dlock.Lease, error) { return l.AcquireRead(ctx, "bench/rw") }},
		{"write", func() (*dlock.Lease, error) { return l.AcquireWrite(ctx, "bench/rw") }},
		{"permit", func() (*dlock.Lease, error) { return l.AcquirePermit(ctx, "bench/sem", 4) }},
		{"leader", func() (*dlock.Lease, error) { return l.Campaign(ctx, "bench/election", "me") }},
	} {
		b.Run(k.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				lease, err := k.acquire()
				if err != nil {
					b.Fatal(err)
				}
				if err := lease.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("all-of-2", func(b *testing.B) {
		b.ReportAllocs()
		names := []string{"bench/b", "bench/a"}
		for b.Loop() {
			m, err := l.AcquireAll(ctx, names)
			if err != nil {
				b.Fatal(err)
			}
			if err := m.Release(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// Readers sharing one readers-writer lock from parallel goroutines.
func BenchmarkReadParallel(b *testing.B) {
	ctx := context.Background()
	l, err := memlock.New(nil)
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			lease, err := l.AcquireRead(ctx, "bench/shared")
			if err != nil {
				b.Fatal(err)
			}
			if err := lease.Release(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
}
