package etcdlock

import (
	"fmt"
	"math"
	"time"

	"github.com/dlockgo/dlock/driver"
)

// This file is Grant.Check for etcd locks: the session's deadline, read
// at the call rather than waited for in the session's goroutine.

// expired is lossAt once a Check found the session's validity over: below
// every clock reading, so that every later Check fails too.
const expired = math.MinInt64

// mono returns t as lossAt counts it: nanoseconds since d.base, on the
// monotonic clock when t carries a reading of it (time.Now does).
func (d *Driver) mono(t time.Time) int64 { return int64(t.Sub(d.base)) }

// check is a lock's Grant.Check. The lock may still be held at now while
// now is before the session's lossAt and the lock has not been signalled
// lost; a Check that finds lossAt passed marks the session expired, so
// that every later Check fails and keepAlive gives the session up rather
// than extend it. It takes no lock and, in the nil path, allocates
// nothing: two atomic loads and a clock subtraction. The deadline is the
// one run would act on, so the answer does not wait for run's goroutine
// to be scheduled (a holder resumed after a SIGSTOP longer than the TTL
// gets an error at its first look: its monotonic clock ran on while it
// was stopped).
func (l *lock) check(now time.Time) error {
	s := l.s
	for {
		at := s.lossAt.Load()
		if s.d.mono(now) < at {
			if l.gone.Load() {
				return l.lostErr()
			}
			return nil
		}
		if at == expired || s.lossAt.CompareAndSwap(at, expired) {
			return fmt.Errorf("%w: lease %x: no keep-alive was answered in time: its validity (%v from the last answered keep-alive's sending, less a margin of %v) is over",
				driver.ErrLost, int64(s.id), s.ttl, lossMargin(s.ttl))
		}
		// keepAlive extended the deadline meanwhile: compare again.
	}
}

// lostErr says why l, marked gone, was lost: its session
// ended, or its key was found deleted.
func (l *lock) lostErr() error {
	if p := l.s.endErr.Load(); p != nil {
		return *p
	}
	return fmt.Errorf("%w: %q: its key was deleted", driver.ErrLost, l.name)
}
