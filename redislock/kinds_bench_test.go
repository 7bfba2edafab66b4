package redislock

import (
	"testing"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/locktest"
)

// BenchmarkKinds: acquire and release of one lock of a kind, with no
// contention, through a Locker (as users call it); mutex for comparison.
func BenchmarkKinds(b *testing.B) {
	l := newLocker(b, newDriver(b, nil))
	locktest.BenchKinds(b, func(*testing.B) *dlock.Locker { return l }, "bench", "read", "write", "permit", "campaign", "mutex")
}

// BenchmarkDriverKinds: Lock and Unlock of the driver alone, per mode.
func BenchmarkDriverKinds(b *testing.B) {
	d := newDriver(b, nil)
	for _, m := range []driver.Mode{driver.Exclusive, driver.Read, driver.Write, driver.Permit, driver.Leader} {
		b.Run(m.String(), func(b *testing.B) { benchDriver(b, d, kindRequest(m, "bench/driver", 30*time.Second)) })
	}
}
