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
// Each property is a named subtest with its own time limit, written to run
// under -race. The suite can fail: package locktest's own tests run it
// against deliberately broken backends and check that it reports them.
package locktest
