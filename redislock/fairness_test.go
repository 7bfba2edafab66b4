package redislock

import (
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockgo/dlock"
)

// TestFairness: a lock is served first come, first served, and a release
// hands it to the first waiter, never back to the releaser: a holder and 7
// waiters queued one after the other (the queue in Redis says so) get the
// lock in their order of arrival, and the holder, which releases and at
// once asks again, gets it only after the last of them. Each has its own
// Locker, or all share one. How often the lock changes hands in a free-for-
// all, and the waits, are figures: BenchmarkContended reports them.
func TestFairness(t *testing.T) {
	for _, shared := range []bool{false, true} {
		t.Run(map[bool]string{false: "lockers=8", true: "lockers=1"}[shared], func(t *testing.T) {
			d := newDriver(t, nil)
			ctx := ctxTimeout(t, time.Minute)
			const workers, name = 8, "fair"
			lockers := make([]*dlock.Locker, workers)
			for i := range lockers {
				if shared && i > 0 {
					lockers[i] = lockers[0]
				} else {
					lockers[i] = newLocker(t, d)
				}
			}
			var (
				mu      sync.Mutex
				order   []int
				holders atomic.Int32
				wg      sync.WaitGroup
			)
			take := func(id int) {
				lease, err := lockers[id].Acquire(ctx, name)
				if err != nil {
					t.Errorf("worker %d: %v", id, err)
					return
				}
				if h := holders.Add(1); h > 1 {
					t.Errorf("%d holders at once", h)
				}
				mu.Lock()
				order = append(order, id)
				mu.Unlock()
				holders.Add(-1)
				if err := lease.Release(ctx); err != nil {
					t.Errorf("worker %d: release: %v", id, err)
				}
			}
			first, err := lockers[0].Acquire(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			for id := 1; id < workers; id++ {
				wg.Go(func() { take(id) })
				waitQueued(t, d, name, int64(id)) // queued in this order
			}
			if err := first.Release(ctx); err != nil {
				t.Fatal(err)
			}
			wg.Go(func() { take(0) }) // at once: it must queue behind the others
			wg.Wait()
			want := []int{1, 2, 3, 4, 5, 6, 7, 0}
			if !slices.Equal(order, want) {
				t.Errorf("grants in the order %v, want %v (first come, first served; the releaser last)", order, want)
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
