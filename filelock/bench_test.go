package filelock_test

import (
	"context"
	"testing"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/filelock"
	"github.com/dlockgo/dlock/locktest"
)

// BenchmarkUncontended: Acquire and Release of one free lock.
func BenchmarkUncontended(b *testing.B) {
	l, _ := newLocker(b, b.TempDir())
	locktest.BenchCycle(b, context.Background(), locktest.Kind(l, "mutex", "bench/uncontended"))
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
	locktest.BenchLoop(b, func() error {
		if _, err := d.TryLock(ctx, r); err != nil {
			return err
		}
		return d.Unlock(ctx, r)
	})
}

// BenchmarkDistinctNames: 16 goroutines of one Locker, each on its own
// lock.
func BenchmarkDistinctNames(b *testing.B) {
	ctx := context.Background()
	l, _ := newLocker(b, b.TempDir())
	locktest.BenchParallel(b, 16, "bench/distinct/", func(name string) error { return locktest.Cycle(ctx, l, name) })
}

// BenchmarkContended: 8 goroutines, each with its own Locker (as 8 clients
// would be), contend for one lock; each release is a chance for a hand-over to another client (handoffs/op says how often
// the lock did change hands: waiters are not served in order, and the
// client that just released may take the lock again). ns/op is the time
// per acquisition.
func BenchmarkContended(b *testing.B) {
	const contenders = 8
	dir := b.TempDir()
	lockers := make([]*dlock.Locker, contenders)
	for i := range lockers {
		lockers[i], _ = newLocker(b, dir)
	}
	handoffs := locktest.BenchContend(b, context.Background(), contenders, locktest.Acquirers(lockers, "bench/contended"))
	b.ReportMetric(float64(handoffs)/float64(b.N), "handoffs/op")
}

// BenchmarkRW: acquire+release of the readers-writer lock through a
// Locker, uncontended.
func BenchmarkRW(b *testing.B) {
	locktest.BenchKinds(b, func(b *testing.B) *dlock.Locker {
		l, _ := newLocker(b, b.TempDir())
		return l
	}, "bench", "read", "write")
}
