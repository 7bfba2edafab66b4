package harness

import (
	"context"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Scenario names.
const (
	S1 = "S1" // 1 goroutine, acquire+release loop on one name
	S2 = "S2" // 16 goroutines, each its own name
	S3 = "S3" // 8 goroutines contending for one name
)

// Worker counts of the scenarios.
const (
	S2Workers = 16
	S3Workers = 8
)

// Budget bounds a scenario: N operations in all (the Go benchmarks' b.N),
// or, when N is 0, a duration D (cmd/compare).
type Budget struct {
	N int64
	D time.Duration
}

// Hooks let a Go benchmark exclude set-up from its timer: Start is called
// just before the workers start, Stop just after the last one returned.
type Hooks struct {
	Start, Stop func()
}

// Result is one scenario's measurement for one implementation.
type Result struct {
	Impl, Scenario string
	Workers        int
	Ops            int64         // completed acquire+release pairs
	Elapsed        time.Duration // wall time of the measured run
	AllocsPerOp    float64       // heap allocations of the whole process per op
	ClientCPU      time.Duration // CPU time of the whole process (user+system) during the run
	P50, P99       time.Duration // acquire+release latency (S1, S2); acquire wait (S3)
	AcquireErrors  int64         // failed acquires other than the scenario ending (retried)
	ReleaseErrors  int64

	// S3 only.
	MaxWait    time.Duration // longest single acquire, including waits cut off at the end
	HandoffP50 time.Duration // release returned -> a different goroutine's acquire returned
	HandoffP99 time.Duration
	// The same, counted from the moment Release was called: the reply to
	// the releaser can arrive after the next holder's grant, so the
	// measure above is often 0 for a backend that hands over on the
	// server; this one shows the whole handover.
	HandoffCallP50      time.Duration
	HandoffCallP99      time.Duration
	Handoffs            int     // consecutive holder pairs
	OtherPct            float64 // share of handoffs that went to another goroutine, %
	MinPerWorker        int64
	MaxPerWorker        int64
	ExclusionViolations int64 // critical sections that overlapped (must be 0)

	// FirstAcquireErr and FirstReleaseErr are the first errors seen, to
	// tell what the error counts are.
	FirstAcquireErr, FirstReleaseErr string

	// Rate, when set, is the throughput (Combine sets it to the median).
	Rate float64

	// Latencies are the acquire+release times of S1 and S2, sorted, for
	// Merge.
	Latencies []time.Duration
}

// OpsPerSec is the throughput.
func (r Result) OpsPerSec() float64 {
	if r.Rate > 0 {
		return r.Rate
	}
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Ops) / r.Elapsed.Seconds()
}

// tickets decide when a scenario's workers stop. By duration: when the
// time is up (waiters still queued are cancelled). By count, for
// independent workers: each operation takes one of N tickets. By count,
// for contending workers (untilDone): they go on until N operations
// completed in all, and then the waiters still queued are cancelled, as
// at the end of a timed run; otherwise the last tickets would be served
// by waiters polling an idle lock, a tail that timed runs do not have.
// firstErr keeps the first error recorded.
type firstErr struct {
	once sync.Once
	msg  string
}

func (f *firstErr) set(err error) { f.once.Do(func() { f.msg = err.Error() }) }

type tickets struct {
	byCount   bool
	untilDone bool
	n         int64
	left      atomic.Int64
	completed atomic.Int64
	deadline  time.Time
	cancel    context.CancelFunc
}

func (t *tickets) take() bool {
	switch {
	case !t.byCount:
		return time.Now().Before(t.deadline)
	case t.untilDone:
		return t.completed.Load() < t.n
	}
	return t.left.Add(-1) >= 0
}

// done records a completed operation.
func (t *tickets) done() {
	if t.untilDone && t.completed.Add(1) >= t.n {
		t.cancel()
	}
}

// run starts workers goroutines running body and measures the whole.
func run(impl Impl, scenario string, workers int, contended bool, b Budget, h Hooks,
	body func(ctx context.Context, w int, t *tickets)) Result {
	runtime.GC()
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	cpu0 := processCPU()
	t := &tickets{byCount: b.N > 0, untilDone: b.N > 0 && contended, n: b.N}
	t.left.Store(b.N)
	var ctx context.Context
	var cancel context.CancelFunc
	if h.Start != nil {
		h.Start()
	}
	start := time.Now()
	if t.byCount {
		// A safety bound only: N operations end the run.
		ctx, cancel = context.WithTimeout(context.Background(), 10*time.Minute)
	} else {
		t.deadline = start.Add(b.D)
		// Waiters still queued when the time is up are cancelled.
		ctx, cancel = context.WithDeadline(context.Background(), t.deadline)
	}
	t.cancel = cancel
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() { body(ctx, w, t) })
	}
	wg.Wait()
	elapsed := time.Since(start)
	if h.Stop != nil {
		h.Stop()
	}
	cpu := processCPU() - cpu0
	cancel()
	runtime.ReadMemStats(&ms1)
	return Result{Scenario: scenario, Workers: workers, Elapsed: elapsed, ClientCPU: cpu,
		AllocsPerOp: float64(ms1.Mallocs - ms0.Mallocs)}
}

// RunS1: one goroutine acquires and releases key in a loop.
func RunS1(impl Impl, key string, b Budget, h Hooks) Result {
	return runIndependent(impl, S1, 1, func(int) string { return key }, b, h)
}

// RunS2: S2Workers goroutines, each acquiring and releasing a name of its
// own in a loop.
func RunS2(impl Impl, key string, b Budget, h Hooks) Result {
	keys := make([]string, S2Workers)
	for i := range keys {
		keys[i] = key + "/w" + string(rune('a'+i))
	}
	return runIndependent(impl, S2, S2Workers, func(w int) string { return keys[w] }, b, h)
}

func runIndependent(impl Impl, scenario string, workers int, keyOf func(int) string, b Budget, h Hooks) Result {
	lats := make([][]time.Duration, workers)
	capEach := 1 << 16
	if b.N > 0 {
		capEach = int(b.N/int64(workers)) + 16
	}
	for i := range lats {
		lats[i] = make([]time.Duration, 0, capEach)
	}
	var acqErr, relErr atomic.Int64
	var acqFirst, relFirst firstErr
	bg := context.Background()
	res := run(impl, scenario, workers, false, b, h, func(ctx context.Context, w int, t *tickets) {
		key := keyOf(w)
		lat := lats[w]
		for t.take() {
			t0 := time.Now()
			held, err := impl.Acquire(ctx, key)
			if err != nil {
				if ctx.Err() != nil {
					break
				}
				acqErr.Add(1)
				acqFirst.set(err)
				time.Sleep(time.Millisecond)
				continue
			}
			if err := held.Release(bg); err != nil {
				relErr.Add(1)
				relFirst.set(err)
			}
			lat = append(lat, time.Since(t0))
		}
		lats[w] = lat
	})
	all := slices.Concat(lats...)
	res.Ops = int64(len(all))
	if res.Ops > 0 {
		res.AllocsPerOp /= float64(res.Ops)
	}
	res.P50, res.P99 = percentile(all, 0.50), percentile(all, 0.99)
	res.Latencies = all
	res.AcquireErrors, res.ReleaseErrors = acqErr.Load(), relErr.Load()
	res.FirstAcquireErr, res.FirstReleaseErr = acqFirst.msg, relFirst.msg
	return res
}

type s3rec struct {
	seq                       int64
	worker                    int
	start, got, relStart, rel time.Time
}

// RunS3: S3Workers goroutines contend for key; the critical section
// increments a counter. It measures waits, handoffs and fairness.
func RunS3(impl Impl, key string, b Budget, h Hooks) Result {
	recs := make([][]s3rec, S3Workers)
	capEach := 1 << 14
	if b.N > 0 {
		capEach = int(min(b.N, 1<<16)) + 16
	}
	for i := range recs {
		recs[i] = make([]s3rec, 0, capEach)
	}
	pending := make([]time.Duration, S3Workers) // waits cut off by the end of the run
	var counter, holders, violations, acqErr, relErr atomic.Int64
	var acqFirst, relFirst firstErr
	bg := context.Background()
	res := run(impl, S3, S3Workers, true, b, h, func(ctx context.Context, w int, t *tickets) {
		rs := recs[w]
		defer func() { recs[w] = rs }()
		for t.take() {
			t0 := time.Now()
			var held Held
			for {
				var err error
				held, err = impl.Acquire(ctx, key)
				if err == nil {
					break
				}
				if ctx.Err() != nil {
					pending[w] = time.Since(t0)
					return
				}
				// Gave up (redsync after its 32 tries) or failed: the
				// goroutine still wants the lock, so its wait goes on.
				acqErr.Add(1)
				acqFirst.set(err)
				time.Sleep(time.Millisecond)
			}
			got := time.Now()
			// The critical section: a non-atomic increment made of atomic
			// steps, so that overlapping holders lose updates (and show up
			// as violations) without a data race.
			if holders.Add(1) != 1 {
				violations.Add(1)
			}
			seq := counter.Load()
			counter.Store(seq + 1)
			holders.Add(-1)
			relStart := time.Now()
			if err := held.Release(bg); err != nil {
				relErr.Add(1)
				relFirst.set(err)
			}
			rs = append(rs, s3rec{seq: seq, worker: w, start: t0, got: got, relStart: relStart, rel: time.Now()})
			t.done()
		}
	})
	all := slices.Concat(recs...)
	res.Ops = int64(len(all))
	if res.Ops > 0 {
		res.AllocsPerOp /= float64(res.Ops)
	}
	res.AcquireErrors, res.ReleaseErrors = acqErr.Load(), relErr.Load()
	res.FirstAcquireErr, res.FirstReleaseErr = acqFirst.msg, relFirst.msg
	res.ExclusionViolations = violations.Load()

	waits := make([]time.Duration, 0, len(all))
	for _, r := range all {
		d := r.got.Sub(r.start)
		waits = append(waits, d)
		res.MaxWait = max(res.MaxWait, d)
	}
	for _, d := range pending {
		res.MaxWait = max(res.MaxWait, d)
	}
	res.P50, res.P99 = percentile(waits, 0.50), percentile(waits, 0.99)

	slices.SortFunc(all, func(a, b s3rec) int { return int(a.seq - b.seq) })
	var hand, handCall []time.Duration
	other := 0
	for i := 1; i < len(all); i++ {
		res.Handoffs++
		if all[i].worker == all[i-1].worker {
			continue
		}
		other++
		// The next holder's acquire can return before the previous
		// holder's release reply arrives; that handoff took no time.
		hand = append(hand, max(0, all[i].got.Sub(all[i-1].rel)))
		handCall = append(handCall, all[i].got.Sub(all[i-1].relStart))
	}
	if res.Handoffs > 0 {
		res.OtherPct = 100 * float64(other) / float64(res.Handoffs)
	}
	res.HandoffP50, res.HandoffP99 = percentile(hand, 0.50), percentile(hand, 0.99)
	res.HandoffCallP50, res.HandoffCallP99 = percentile(handCall, 0.50), percentile(handCall, 0.99)

	res.MinPerWorker = -1
	for w := range recs {
		n := int64(len(recs[w]))
		if res.MinPerWorker < 0 || n < res.MinPerWorker {
			res.MinPerWorker = n
		}
		res.MaxPerWorker = max(res.MaxPerWorker, n)
	}
	return res
}

// processCPU returns the user+system CPU time this process used so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// percentile returns the nearest-rank p-quantile of ds (sorting it); -1
// when ds is empty.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return -1
	}
	if !slices.IsSorted(ds) {
		slices.Sort(ds)
	}
	i := int(p*float64(len(ds))+0.999999999) - 1
	return ds[min(max(i, 0), len(ds)-1)]
}

// Merge joins the measurements of one implementation in several time
// slices of one S1 or S2 run into one: operations, time and CPU add up,
// latency percentiles are those of all the slices' operations together.
func Merge(parts []Result) Result {
	if len(parts) == 0 {
		return Result{}
	}
	out := parts[0]
	out.Ops, out.Elapsed, out.ClientCPU, out.AcquireErrors, out.ReleaseErrors = 0, 0, 0, 0, 0
	var allocs float64
	var all []time.Duration
	for _, r := range parts {
		out.Ops += r.Ops
		out.Elapsed += r.Elapsed
		out.ClientCPU += r.ClientCPU
		out.AcquireErrors += r.AcquireErrors
		out.ReleaseErrors += r.ReleaseErrors
		allocs += r.AllocsPerOp * float64(r.Ops)
		all = append(all, r.Latencies...)
		if out.FirstAcquireErr == "" {
			out.FirstAcquireErr = r.FirstAcquireErr
		}
		if out.FirstReleaseErr == "" {
			out.FirstReleaseErr = r.FirstReleaseErr
		}
	}
	if out.Ops > 0 {
		out.AllocsPerOp = allocs / float64(out.Ops)
	}
	slices.Sort(all)
	out.Latencies = all
	out.P50, out.P99 = percentile(all, 0.50), percentile(all, 0.99)
	return out
}

// Run runs the named scenario.
func Run(scenario string, impl Impl, key string, b Budget, h Hooks) Result {
	switch scenario {
	case S1:
		return RunS1(impl, key, b, h)
	case S2:
		return RunS2(impl, key, b, h)
	case S3:
		return RunS3(impl, key, b, h)
	}
	panic("unknown scenario " + scenario)
}

// Scenarios lists the scenarios in order.
var Scenarios = []string{S1, S2, S3}
