// Package locktest is dlock's conformance suite. Every backend's tests run
// it against the real store with a small Harness:
//
//	func TestConformance(t *testing.T) {
//		locktest.Run(t, locktest.Harness{
//			NewLocker: func(t *testing.T, opts ...dlock.Option) *dlock.Locker { ... },
//			TakeAway:  func(t *testing.T, name string) { ... },
//		})
//	}
//
// Besides the mutex, the suite checks the multi-lock (AcquireAll, built on
// the mutex, so every backend runs it) and each optional kind of lock the
// Locker Supports: readers-writer (RW*), semaphore (Semaphore*) and
// election (Election*) properties. For a kind the backend lacks, the
// property checks that its methods fail with dlock.ErrUnsupported, and
// passes. A driver that is a driver.Inspector (what `dlock status` reads)
// must list exactly the locks held under a prefix (InspectListsHolders).
//
// Each property is a named subtest with its own time limit, written to run
// under -race. The suite can fail: package locktest's own tests run it
// against deliberately broken backends and check that it reports them.
//
// The package also holds what every backend's own tests share: the bodies
// of their benchmarks (BenchCycle, BenchKinds, BenchParallel,
// BenchContend), the goroutine-leak check (NoLeak) and small helpers.
package locktest
