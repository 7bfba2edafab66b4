package s3lock_test

import (
	"context"
	"testing"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/locktest"
)

// The benchmarks run against one versitygw of their own (POSIX backend
// on the test's temporary directory). ns/op is the time per
// acquire+release; for Contended8 it is wall time per acquisition with 8
// contenders on one name, who poll with the Locker's default backoff.
// Each name is taken once before the timer starts, so that the first
// acquisition's wait of a second is not counted.

func BenchmarkAcquireRelease(b *testing.B) {
	srv := testenv.StartS3(b)
	l := newLocker(b, srv, testPrefix())
	locktest.Warm(b, l, "bench/u")
	locktest.BenchCycle(b, context.Background(), locktest.Kind(l, "mutex", "bench/u"))
}

// BenchmarkContended8: 8 goroutines over 4 Lockers take one name in turn.
func BenchmarkContended8(b *testing.B) {
	srv := testenv.StartS3(b)
	prefix := testPrefix()
	lockers := make([]*dlock.Locker, 4)
	for i := range lockers {
		lockers[i] = newLocker(b, srv, prefix)
		locktest.Warm(b, lockers[i], "bench/c")
	}
	moved := locktest.BenchContend(b, context.Background(), 8, locktest.Acquirers(lockers, "bench/c"))
	b.ReportMetric(100*float64(moved)/float64(b.N), "handoff-%")
}
