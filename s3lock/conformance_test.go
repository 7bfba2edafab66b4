package s3lock_test

import (
	"testing"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/locktest"
)

// suiteTTL is the conformance suite's TTL: two grains of the store's
// one-second times, the shortest the driver takes.
const suiteTTL = 2 * time.Second

func TestConformance(t *testing.T) {
	srv := testenv.StartS3(t)
	prefix := testPrefix()
	locktest.Run(t, locktest.Harness{
		NewLocker: func(t *testing.T, opts ...dlock.Option) *dlock.Locker {
			return newLocker(t, srv, prefix, opts...)
		},
		TakeAway: func(t *testing.T, name string) { deleteLock(t, srv, prefix, name) },
		TTL:      suiteTTL,
		NewName:  time.Second,
	})
}
