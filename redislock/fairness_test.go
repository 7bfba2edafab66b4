package redislock

import (
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockgo/dlock"
)

// TestFairness: 8 goroutines contend for one name with a tiny critical
// section, each with its own Locker or all sharing one.
func TestFairness(t *testing.T) {
	for _, shared := range []bool{false, true} {
		t.Run(map[bool]string{false: "lockers=8", true: "lockers=1"}[shared], func(t *testing.T) {
			d := newDriver(t, nil)
			const workers, total = 8, 500
			lockers := make([]*dlock.Locker, workers)
			for i := range lockers {
				if shared && i > 0 {
					lockers[i] = lockers[0]
				} else {
					lockers[i] = newLocker(t, d)
				}
			}
			st := contend(t, lockers, "fair", total)
			t.Logf("%d acquisitions in %v (%.0f/s); handoffs to another goroutine %.1f%%; wait max %v, p50 %v, p99 %v",
				st.n, st.elapsed, float64(st.n)/st.elapsed.Seconds(), st.otherPct(), st.max, st.pct(50), st.pct(99))
			if st.maxHolders > 1 {
				t.Errorf("%d holders at once", st.maxHolders)
			}
			if p := st.otherPct(); p < 90 {
				t.Errorf("handoffs to another goroutine %.1f%%, want >= 90%%", p)
			}
			if st.max > time.Second {
				t.Errorf("longest wait %v, want well under 1s", st.max)
			}
		})
	}
}

// contention measures n acquisitions of one name by len(lockers)
// goroutines, one Locker each.
type contention struct {
	n, other   int
	maxHolders int32
	waits      []time.Duration
	max        time.Duration
	elapsed    time.Duration
}

func (c *contention) otherPct() float64 { return 100 * float64(c.other) / float64(max(c.n-1, 1)) }

func (c *contention) pct(p int) time.Duration {
	if len(c.waits) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), c.waits...)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)]
}

func contend(t testing.TB, lockers []*dlock.Locker, name string, total int) *contention {
	ctx := ctxTimeout(t, 2*time.Minute)
	var (
		mu      sync.Mutex
		st      contention
		last    = -1
		holders atomic.Int32
		wg      sync.WaitGroup
		failed  atomic.Bool
	)
	start := time.Now()
	for id, l := range lockers {
		wg.Go(func() {
			for !failed.Load() {
				t0 := time.Now()
				lease, err := l.Acquire(ctx, name)
				waited := time.Since(t0)
				if err != nil {
					failed.Store(true)
					t.Errorf("worker %d: %v", id, err)
					return
				}
				h := holders.Add(1)
				mu.Lock()
				done := st.n >= total
				if !done {
					st.n++
					if last != -1 && last != id {
						st.other++
					}
					last = id
					st.waits = append(st.waits, waited)
					st.max = max(st.max, waited)
					st.maxHolders = max(st.maxHolders, h)
				}
				mu.Unlock()
				holders.Add(-1)
				if err := lease.Release(ctx); err != nil {
					failed.Store(true)
					t.Errorf("worker %d: release: %v", id, err)
					return
				}
				if done {
					return
				}
			}
		})
	}
	wg.Wait()
	st.elapsed = time.Since(start)
	return &st
}
