package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlockgo/dlock"
	_ "github.com/dlockgo/dlock/redislock"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/metric"
)

// The workload's settings, which the caption states.
const (
	ttl         = 2 * time.Second // short, so that a stall of the store loses leases
	reportsWait = 6 * time.Second // how long a reports caller waits before giving up
	stallFor    = 6 * time.Second // how long the store stalls
	prefix      = "dashpic:"      // the keys' prefix on the private Redis
	reportsLock = "reports/daily"
	readTimeout = "500ms" // how long a call waits for the store's reply
)

// An event is something the operator did to the store, for the picture's
// bands and lines.
type event struct {
	kind     string // "stall", "delete" or "burst"
	from, to time.Time
}

// workload is a run's record: when it ran, its events, and how its calls
// ended (for the log).
type workload struct {
	start, end time.Time
	mu         sync.Mutex
	events     []event
	counts     map[string]int
	err        error // the first failure of the operator's steps
	// reportsSince is when the reports lease held now was granted (Unix
	// ns), or 0.
	reportsSince atomic.Int64
}

// runWorkload runs, for d, three Lockers (three processes' worth) with
// the class of a name its part before "/", on the Redis at addr, and a
// fourth whose class function returns whole names, all recording into
// mp; ctl plays the operator: it stalls the store and deletes a held lock.
func runWorkload(ctx context.Context, addr string, ctl *redis.Client, mp metric.MeterProvider, d time.Duration) (w *workload, err error) {
	open := func(class func(string) string) (*dlock.Locker, error) {
		return dlock.Open(ctx, "redis://"+addr+"?prefix="+prefix+"&read_timeout="+readTimeout,
			dlock.WithMeterProvider(mp), dlock.WithNameClass(class), dlock.WithTTL(ttl))
	}
	byPrefix := func(name string) string { c, _, _ := strings.Cut(name, "/"); return c }
	var lockers []*dlock.Locker
	defer func() {
		for _, l := range lockers {
			if cerr := l.Close(); cerr != nil && err == nil {
				err = fmt.Errorf("close a Locker: %w", cerr)
			}
		}
	}()
	for range 4 {
		class := byPrefix
		if len(lockers) == 3 {
			class = func(name string) string { return name } // unbounded
		}
		l, err := open(class)
		if err != nil {
			return nil, err
		}
		lockers = append(lockers, l)
	}

	w = &workload{start: time.Now(), counts: map[string]int{}}
	at := func(f float64) time.Time { return w.start.Add(time.Duration(f * float64(d))) }
	rctx, cancel := context.WithDeadline(ctx, w.start.Add(d))
	defer cancel()
	var wg sync.WaitGroup
	for i, l := range lockers[:3] {
		for range 2 {
			wg.Go(func() { w.orders(rctx, l) })
		}
		wg.Go(func() { w.cron(rctx, l, time.Duration(i)*333*time.Millisecond) })
		wg.Go(func() { w.reports(rctx, l) })
	}
	wg.Go(func() { w.burst(rctx, lockers[3], at(0.48), at(0.68)) })
	wg.Go(func() {
		w.operate(rctx, at(0.20), func() error { return w.deleteHeld(rctx, ctl) })
		w.operate(rctx, at(0.30), func() error { return w.stall(rctx, ctl) })
		w.operate(rctx, at(0.60), func() error { return w.deleteHeld(rctx, ctl) })
		w.operate(rctx, at(0.78), func() error { return w.stall(rctx, ctl) })
	})
	wg.Wait()
	w.end = time.Now()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return w, w.err
}

// orders is a caller of short locks over 10 names: a wait of a second at
// most, a hold of 10 to 100 ms, about twice a second.
func (w *workload) orders(ctx context.Context, l *dlock.Locker) {
	for ctx.Err() == nil {
		actx, cancel := context.WithTimeout(ctx, time.Second)
		lease, err := l.Acquire(actx, fmt.Sprintf("orders/%d", rand.IntN(10)))
		cancel()
		if w.acquired(ctx, "orders", err) {
			w.hold(ctx, "orders", lease, jitter(10*time.Millisecond, 100*time.Millisecond))
		}
		_ = sleep(ctx, jitter(300*time.Millisecond, 700*time.Millisecond))
	}
}

// cron tries, every second from offset on, the one lock every process's
// cron wants, and holds it for 2.5 s when it gets it.
func (w *workload) cron(ctx context.Context, l *dlock.Locker, offset time.Duration) {
	if sleep(ctx, offset) != nil {
		return
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		lease, err := l.TryAcquire(ctx, "cron/nightly")
		if w.acquired(ctx, "cron", err) {
			w.hold(ctx, "cron", lease, 2500*time.Millisecond)
		}
	}
}

// reports waits up to reportsWait for one long lock, and holds it for 3
// to 8 s.
func (w *workload) reports(ctx context.Context, l *dlock.Locker) {
	for ctx.Err() == nil {
		actx, cancel := context.WithTimeout(ctx, reportsWait)
		lease, err := l.Acquire(actx, reportsLock)
		cancel()
		if w.acquired(ctx, "reports", err) {
			since := time.Now().UnixNano()
			w.reportsSince.Store(since)
			w.hold(ctx, "reports", lease, jitter(3*time.Second, 8*time.Second))
			w.reportsSince.CompareAndSwap(since, 0)
		}
		_ = sleep(ctx, jitter(300*time.Millisecond, time.Second))
	}
}

// burst takes, from from to to, 250 new names, evenly, on l, whose class
// function returns whole names: past its first 100 classes, the names
// fold into _other.
func (w *workload) burst(ctx context.Context, l *dlock.Locker, from, to time.Time) {
	if sleep(ctx, time.Until(from)) != nil {
		return
	}
	every := to.Sub(from) / 250
	for i := 0; ctx.Err() == nil && time.Now().Before(to); i++ {
		lease, err := l.TryAcquire(ctx, fmt.Sprintf("jobs/%d", i))
		if w.acquired(ctx, "jobs", err) {
			w.hold(ctx, "jobs", lease, 0)
		}
		_ = sleep(ctx, every)
	}
	w.record(event{kind: "burst", from: from, to: time.Now()})
}

// acquired counts how an acquisition of class ended, and reports whether
// it got the lock.
func (w *workload) acquired(ctx context.Context, class string, err error) bool {
	switch {
	case err == nil:
		w.count(class + " acquired")
	case ctx.Err() != nil:
		w.count(class + " cut short by the run's end")
	case errors.Is(err, dlock.ErrNotAcquired):
		w.count(class + " busy")
	case errors.Is(err, context.DeadlineExceeded):
		w.count(class + " gave up waiting")
	default:
		w.count(class + " failed")
	}
	return err == nil
}

// hold keeps lease for d, or until it is lost or the run ends, then
// releases it and counts how it ended.
func (w *workload) hold(ctx context.Context, class string, lease *dlock.Lease, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-lease.Done():
	case <-ctx.Done():
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Second)
	defer cancel()
	switch err := lease.Release(rctx); {
	case err == nil:
		w.count(class + " released")
	case errors.Is(err, dlock.ErrLost):
		w.count(class + " lost")
	default:
		w.count(class + " release failed")
	}
}

// operate runs the operator's step do at t; a failure is the run's.
func (w *workload) operate(ctx context.Context, t time.Time, do func() error) {
	if sleep(ctx, time.Until(t)) != nil {
		return
	}
	if err := do(); err != nil && ctx.Err() == nil {
		w.mu.Lock()
		w.err = cmp.Or(w.err, err)
		w.mu.Unlock()
	}
}

// deleteHeld deletes the reports lock on the store as an operator would,
// once some lease holds it: its holder's next renewal finds it gone.
func (w *workload) deleteHeld(ctx context.Context, ctl *redis.Client) error {
	for range 50 {
		n, err := ctl.Del(ctx, prefix+"{"+reportsLock+"}").Result()
		if err != nil {
			return fmt.Errorf("DEL the held lock: %w", err)
		}
		if n == 1 {
			now := time.Now()
			w.record(event{kind: "delete", from: now, to: now})
			return nil
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
	return fmt.Errorf("%s was not held for 5 s: nothing to delete", reportsLock)
}

// stall makes the store answer no client for stallFor, once a reports
// lease was granted less than a second ago: it is held 2 s at least into
// the stall, longer than it is valid without a renewal, and so is lost.
func (w *workload) stall(ctx context.Context, ctl *redis.Client) error {
	for tries := 0; ; tries++ {
		since := w.reportsSince.Load()
		if since != 0 && time.Since(time.Unix(0, since)) < time.Second {
			break
		}
		if tries == 1000 {
			return fmt.Errorf("no grant of %s in 20 s: no lease for the stall to lose", reportsLock)
		}
		if err := sleep(ctx, 20*time.Millisecond); err != nil {
			return err
		}
	}
	now := time.Now()
	if err := ctl.Do(ctx, "CLIENT", "PAUSE", stallFor.Milliseconds(), "ALL").Err(); err != nil {
		return fmt.Errorf("CLIENT PAUSE: %w", err)
	}
	w.record(event{kind: "stall", from: now, to: now.Add(stallFor)})
	return nil
}

// record adds an event.
func (w *workload) record(e event) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.events = append(w.events, e)
}

// count adds one to what's count.
func (w *workload) count(what string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.counts[what]++
}

// outcomes lists the counts, for the log.
func (w *workload) outcomes() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(w.counts)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, w.counts[k]))
	}
	return strings.Join(parts, ", ")
}

// jitter is a duration drawn evenly from [lo, hi).
func jitter(lo, hi time.Duration) time.Duration {
	return lo + rand.N(hi-lo)
}
