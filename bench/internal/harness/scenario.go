package harness

import (
	"cmp"
	"context"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlockgo/dlock/internal/scale"
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
	Ctx            string // the context kind of the lock calls
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
	// The same, from when Release was called: the releaser's reply can
	// arrive after the next holder's grant, so the measure above is often
	// 0 for a backend that hands over on the server.
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

// Context kinds: what every lock call (Acquire and Release) of a
// measurement is given. Each call gets a context of its own.
const (
	// CtxBackground is context.Background().
	CtxBackground = "background"
	// CtxCancel is context.WithCancel(context.Background()), cancelled when
	// the call returns: cancellable, without a deadline, as an HTTP
	// handler's request context.
	CtxCancel = "cancel"
	// CtxTimeout is context.WithTimeout(context.Background(), CallTimeout).
	CtxTimeout = "timeout"
)

// CtxKinds lists the context kinds in order.
var CtxKinds = []string{CtxBackground, CtxCancel, CtxTimeout}

// CallTimeout is the deadline of each call under CtxTimeout.
const CallTimeout = time.Second

func noCancel() {}

// CallContext returns a context of the kind for one lock call, and the
// function to call when the call has returned.
func CallContext(kind string) (context.Context, context.CancelFunc) {
	switch kind {
	case CtxCancel:
		return context.WithCancel(context.Background())
	case CtxTimeout:
		return context.WithTimeout(context.Background(), CallTimeout)
	case CtxBackground:
		return context.Background(), noCancel
	}
	panic("unknown context kind " + kind)
}

// ValidCtx reports whether kind is a context kind.
func ValidCtx(kind string) bool { return slices.Contains(CtxKinds, kind) }

// firstErr keeps the first error recorded.
type firstErr struct {
	once sync.Once
	msg  string
}

func (f *firstErr) set(err error) { f.once.Do(func() { f.msg = err.Error() }) }

// tickets decide when a scenario's workers stop: when the time is up, or
// by count, each operation taking one of N tickets; contending workers
// (untilDone) go on until N operations completed in all, else waiters
// polling an idle lock would serve the last tickets, a tail that timed
// runs do not have.
//
// A contended run ends (finish) when the time is up or the N-th operation
// completed: waiting acquires are cut off (their contexts cancelled, save
// under CtxBackground, whose late acquisitions go uncounted), and their
// wait so far counts.
type tickets struct {
	byCount   bool
	untilDone bool
	n         int64
	left      atomic.Int64
	completed atomic.Int64
	deadline  time.Time

	once  sync.Once
	over  atomic.Bool
	end   time.Time // when the run ended; set by finish
	stop  func()    // Hooks.Stop
	slots []slot    // the waiting acquires' cancel functions, by worker
}

// slot holds the cancel function of a worker's acquire in progress, so
// that finish can cut it off.
type slot struct {
	mu     sync.Mutex
	cancel context.CancelFunc
}

func (t *tickets) take() bool {
	switch {
	case t.over.Load():
		return false
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
		t.finish()
	}
}

// finish ends the run (once): it records the time, stops the benchmark
// timer and cancels the acquires still waiting.
func (t *tickets) finish() {
	t.once.Do(func() {
		t.end = time.Now()
		t.over.Store(true)
		if t.stop != nil {
			t.stop()
		}
		for i := range t.slots {
			s := &t.slots[i]
			s.mu.Lock()
			if s.cancel != nil {
				s.cancel()
			}
			s.mu.Unlock()
		}
	})
}

// arm records worker w's acquire cancel function; false when the run is
// already over (the acquire must not start).
func (t *tickets) arm(w int, cancel context.CancelFunc) bool {
	s := &t.slots[w]
	s.mu.Lock()
	defer s.mu.Unlock()
	if t.over.Load() {
		return false
	}
	s.cancel = cancel
	return true
}

func (t *tickets) disarm(w int) {
	s := &t.slots[w]
	s.mu.Lock()
	s.cancel = nil
	s.mu.Unlock()
}

// run starts workers goroutines running body and measures the whole. A
// contended run ends when finish is called (by the budget); an
// independent one when its last worker returned.
func run(scenario, kind string, workers int, contended bool, b Budget, h Hooks,
	body func(w int, t *tickets)) (Result, *tickets) {
	runtime.GC()
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	cpu0 := scale.SelfCPU()
	t := &tickets{byCount: b.N > 0, untilDone: b.N > 0 && contended, n: b.N, stop: h.Stop,
		slots: make([]slot, workers)}
	t.left.Store(b.N)
	if h.Start != nil {
		h.Start()
	}
	start := time.Now()
	if !t.byCount {
		t.deadline = start.Add(b.D)
		if contended {
			timer := time.AfterFunc(b.D, t.finish)
			defer timer.Stop()
		}
	}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() { body(w, t) })
	}
	wg.Wait()
	t.finish()
	elapsed := t.end.Sub(start)
	cpu := scale.SelfCPU() - cpu0
	runtime.ReadMemStats(&ms1)
	return Result{Scenario: scenario, Ctx: kind, Workers: workers, Elapsed: elapsed, ClientCPU: cpu,
		AllocsPerOp: float64(ms1.Mallocs - ms0.Mallocs)}, t
}

// RunS1: one goroutine acquires and releases key in a loop, each call
// with a context of the kind.
func RunS1(impl Impl, key, kind string, b Budget, h Hooks) Result {
	return runIndependent(impl, S1, kind, 1, func(int) string { return key }, b, h)
}

// RunS2: S2Workers goroutines, each acquiring and releasing a name of its
// own in a loop.
func RunS2(impl Impl, key, kind string, b Budget, h Hooks) Result {
	keys := make([]string, S2Workers)
	for i := range keys {
		keys[i] = key + "/w" + string(rune('a'+i))
	}
	return runIndependent(impl, S2, kind, S2Workers, func(w int) string { return keys[w] }, b, h)
}

func runIndependent(impl Impl, scenario, kind string, workers int, keyOf func(int) string, b Budget, h Hooks) Result {
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
	res, _ := run(scenario, kind, workers, false, b, h, func(w int, t *tickets) {
		key := keyOf(w)
		lat := lats[w]
		for t.take() {
			t0 := time.Now()
			ctx, cancel := CallContext(kind)
			held, err := impl.Acquire(ctx, key)
			cancel()
			if err != nil {
				acqErr.Add(1)
				acqFirst.set(err)
				time.Sleep(time.Millisecond)
				continue
			}
			ctx, cancel = CallContext(kind)
			err = held.Release(ctx)
			cancel()
			if err != nil {
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
	res.P50, res.P99 = percentile(all, 50), percentile(all, 99)
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
// increments a counter. It measures waits, handoffs and fairness. Every
// call has a context of the kind.
func RunS3(impl Impl, key, kind string, b Budget, h Hooks) Result {
	recs := make([][]s3rec, S3Workers)
	capEach := 1 << 14
	if b.N > 0 {
		capEach = int(min(b.N, 1<<16)) + 16
	}
	for i := range recs {
		recs[i] = make([]s3rec, 0, capEach)
	}
	pending := make([]time.Time, S3Workers) // starts of the waits cut off by the end of the run
	var counter, holders, violations, acqErr, relErr atomic.Int64
	var acqFirst, relFirst firstErr
	res, t := run(S3, kind, S3Workers, true, b, h, func(w int, t *tickets) {
		rs := recs[w]
		defer func() { recs[w] = rs }()
		for t.take() {
			t0 := time.Now()
			var held Held
			for {
				ctx, cancel := CallContext(kind)
				if !t.arm(w, cancel) {
					cancel()
					pending[w] = t0
					return
				}
				var err error
				held, err = impl.Acquire(ctx, key)
				t.disarm(w)
				cancel()
				if err == nil {
					break
				}
				if t.over.Load() {
					pending[w] = t0
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
			ctx, cancel := CallContext(kind)
			err := held.Release(ctx)
			cancel()
			if err != nil {
				relErr.Add(1)
				relFirst.set(err)
			}
			rs = append(rs, s3rec{seq: seq, worker: w, start: t0, got: got, relStart: relStart, rel: time.Now()})
			t.done()
		}
	})
	// Acquisitions after the end (an acquire under CtxBackground cannot be
	// cut off) are not counted; their wait counts up to the end.
	var all []s3rec
	var late []time.Time
	for _, w := range recs {
		for _, r := range w {
			if r.got.After(t.end) {
				late = append(late, r.start)
			} else {
				all = append(all, r)
			}
		}
	}
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
	for _, p := range append(late, pending...) {
		if !p.IsZero() {
			res.MaxWait = max(res.MaxWait, max(0, t.end.Sub(p)))
		}
	}
	res.P50, res.P99 = percentile(waits, 50), percentile(waits, 99)

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
	res.HandoffP50, res.HandoffP99 = percentile(hand, 50), percentile(hand, 99)
	res.HandoffCallP50, res.HandoffCallP99 = percentile(handCall, 50), percentile(handCall, 99)

	perWorker := make([]int64, S3Workers)
	for _, r := range all {
		perWorker[r.worker]++
	}
	res.MinPerWorker, res.MaxPerWorker = slices.Min(perWorker), slices.Max(perWorker)
	return res
}

// percentile returns the nearest-rank p-th percentile of ds (sorting it);
// -1 when ds is empty.
func percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return -1
	}
	return scale.Percentile(ds, p)
}

// Merge joins the measurements of one implementation in several time
// slices of one S1 or S2 run into one: operations, time and CPU add up,
// latency percentiles are those of all the slices' operations together.
func Merge(parts []Result) Result {
	if len(parts) == 0 {
		return Result{}
	}
	out := parts[0].zeroCounts()
	out.ClientCPU = 0
	var allocs float64
	var all []time.Duration
	for _, r := range parts {
		out.addCounts(r)
		out.ClientCPU += r.ClientCPU
		allocs += r.AllocsPerOp * float64(r.Ops)
		all = append(all, r.Latencies...)
	}
	if out.Ops > 0 {
		out.AllocsPerOp = allocs / float64(out.Ops)
	}
	slices.Sort(all)
	out.Latencies = all
	out.P50, out.P99 = percentile(all, 50), percentile(all, 99)
	return out
}

// zeroCounts returns r with the counts addCounts adds up at zero.
func (r Result) zeroCounts() Result {
	r.Ops, r.Elapsed, r.AcquireErrors, r.ReleaseErrors, r.ExclusionViolations, r.Handoffs = 0, 0, 0, 0, 0, 0
	return r
}

// addCounts adds r's operations, time, errors, overlaps and handoffs to
// out's, and takes r's first errors where out has none.
func (out *Result) addCounts(r Result) {
	out.Ops, out.Elapsed = out.Ops+r.Ops, out.Elapsed+r.Elapsed
	out.AcquireErrors, out.ReleaseErrors = out.AcquireErrors+r.AcquireErrors, out.ReleaseErrors+r.ReleaseErrors
	out.ExclusionViolations, out.Handoffs = out.ExclusionViolations+r.ExclusionViolations, out.Handoffs+r.Handoffs
	out.FirstAcquireErr = cmp.Or(out.FirstAcquireErr, r.FirstAcquireErr)
	out.FirstReleaseErr = cmp.Or(out.FirstReleaseErr, r.FirstReleaseErr)
}

// Run runs the named scenario with lock calls of the context kind.
func Run(scenario string, impl Impl, key, kind string, b Budget, h Hooks) Result {
	switch scenario {
	case S1:
		return RunS1(impl, key, kind, b, h)
	case S2:
		return RunS2(impl, key, kind, b, h)
	case S3:
		return RunS3(impl, key, kind, b, h)
	}
	panic("unknown scenario " + scenario)
}

// Scenarios lists the scenarios in order.
var Scenarios = []string{S1, S2, S3}
