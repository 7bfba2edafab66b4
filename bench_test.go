package dlock_test

import (
	"context"
	"testing"

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
