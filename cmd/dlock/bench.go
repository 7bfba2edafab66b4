package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/internal/scale"
)

const benchHelp = `Usage: dlock bench [flags]

Measures the backend(s) given with --backend (repeatable; default as for
every command) in three phases of --duration each:

  sequential  one goroutine: TryAcquire then Release of one name, over and
              over; latency percentiles of each call, and cycles per second
  parallel    --concurrency goroutines, each on a name of its own; cycles
              per second
  contended   --concurrency goroutines on one name, each waiting (Acquire)
              then releasing at once; acquisitions per second, the longest
              wait, and how often the lock went to another goroutine than
              the one that just released it (a fair handoff gives about
              (N-1)/N; a backend that lets the releaser barge back in gives
              less)

With --scale it sweeps instead how the cost grows with the work, for each
backend: waiters on one name (--waiters), names held at once (--held) and
clients each on a name of its own (--clients); every point is bounded in
time, and a point a backend cannot reach is reported with what it reached
and why. It writes scale.csv and one SVG chart per sweep to --out, and a
summary to stdout. docs/SCALING.md explains each figure.

Progress goes to stderr; the table, one column per backend, to stdout. The
names used are under dlock-bench/ and unique to the run.
`

const benchExamples = `  dlock bench
  dlock bench --backend redis://127.0.0.1:6379 --backend zk://127.0.0.1:2181 --duration 5s
  dlock bench --backend postgres://postgres@127.0.0.1:5432/test --concurrency 16
  dlock bench --scale --backend redis://127.0.0.1:6379 --out scale/
`

// benchResult is what one backend measured.
type benchResult struct {
	backend                        string
	acqP50, acqP99, relP50, relP99 time.Duration
	seqRate, parRate, contRate     float64
	maxWait                        time.Duration
	handoff                        float64
}

func cmdBench(ctx context.Context, sio *stdio, args []string) int {
	f := newFlags("bench", benchHelp, benchExamples)
	dur := f.Duration("duration", 2*time.Second, "how long each phase runs")
	conc := f.Int("concurrency", 8, "goroutines in the parallel and contended phases")
	sf := addScaleFlags(f)
	if code, ok := f.parseNone(sio, args); !ok {
		return code
	}
	switch {
	case *dur < 10*time.Millisecond:
		return usageErr(sio, f.cmd, "--duration %v: want at least 10ms", *dur)
	case *conc < 2 || *conc > 1024:
		return usageErr(sio, f.cmd, "--concurrency %d: want 2 to 1024", *conc)
	}
	log, err := f.logger(sio.err)
	if err != nil {
		return usageErr(sio, f.cmd, "%v", err)
	}
	backends := []string(f.backends)
	if len(backends) == 0 {
		backends = []string{f.backend()}
	}
	if *sf.on {
		return runScale(ctx, sio, f.cmd, sf, backends, dlock.WithLogger(log))
	}
	// Open every backend first: a bad URL fails before minutes of work.
	var lockers []*dlock.Locker
	defer func() {
		for _, l := range lockers {
			_ = l.Close()
		}
	}()
	for _, b := range backends {
		l, code := openLocker(ctx, sio, f.cmd, b, dlock.WithLogger(log))
		if l == nil {
			return code
		}
		lockers = append(lockers, l)
	}
	prog := newProgress(sio.err)
	results := make([]benchResult, len(backends))
	for i, l := range lockers {
		b := &bench{l: l, dur: *dur, conc: *conc, prefix: "dlock-bench/" + newID() + "/", prog: prog, backend: redact(backends[i])}
		r, err := b.run(ctx)
		if err != nil {
			prog.done()
			return failf(sio, exitUnavailable, f.cmd, "%s: %s", redact(backends[i]), oneLine(err))
		}
		results[i] = r
	}
	prog.done()
	printBench(sio.out, results, *conc)
	return exitOK
}

type bench struct {
	l       *dlock.Locker
	dur     time.Duration
	conc    int
	prefix  string
	prog    *progress
	backend string
}

func (b *bench) run(ctx context.Context) (benchResult, error) {
	r := benchResult{backend: b.backend}
	if err := b.sequential(ctx, &r); err != nil {
		return r, err
	}
	if err := b.parallel(ctx, &r); err != nil {
		return r, err
	}
	return r, b.contended(ctx, &r)
}

func (b *bench) sequential(ctx context.Context, r *benchResult) error {
	b.prog.phase(b.backend, "sequential", b.dur)
	name := b.prefix + "seq"
	var acq, rel []time.Duration
	deadline := time.Now().Add(b.dur)
	start := time.Now()
	for time.Now().Before(deadline) {
		t0 := time.Now()
		lease, err := b.l.TryAcquire(ctx, name)
		if err != nil {
			return fmt.Errorf("sequential: %w", err)
		}
		t1 := time.Now()
		if err := lease.Release(ctx); err != nil {
			return fmt.Errorf("sequential: %w", err)
		}
		acq = append(acq, t1.Sub(t0))
		rel = append(rel, time.Since(t1))
	}
	r.seqRate = float64(len(acq)) / time.Since(start).Seconds()
	r.acqP50, r.acqP99 = scale.Percentile(acq, 50), scale.Percentile(acq, 99)
	r.relP50, r.relP99 = scale.Percentile(rel, 50), scale.Percentile(rel, 99)
	return nil
}

func (b *bench) parallel(ctx context.Context, r *benchResult) error {
	b.prog.phase(b.backend, fmt.Sprintf("parallel, %d goroutines", b.conc), b.dur)
	var cycles atomic.Int64
	errs := make(chan error, b.conc)
	deadline := time.Now().Add(b.dur)
	start := time.Now()
	var wg sync.WaitGroup
	for g := range b.conc {
		wg.Go(func() {
			name := fmt.Sprintf("%spar-%d", b.prefix, g)
			for time.Now().Before(deadline) {
				lease, err := b.l.TryAcquire(ctx, name)
				if err == nil {
					err = lease.Release(ctx)
				}
				if err != nil {
					errs <- fmt.Errorf("parallel: %w", err)
					return
				}
				cycles.Add(1)
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	r.parRate = float64(cycles.Load()) / time.Since(start).Seconds()
	return nil
}

func (b *bench) contended(ctx context.Context, r *benchResult) error {
	b.prog.phase(b.backend, fmt.Sprintf("contended, %d goroutines on one name", b.conc), b.dur)
	name := b.prefix + "contended"
	var (
		mu       sync.Mutex
		last     = -1
		n, other int
		maxWait  time.Duration
	)
	errs := make(chan error, b.conc)
	deadline := time.Now().Add(b.dur)
	// Waits past the deadline are cut short, out of the phase's time.
	cctx, cancel := context.WithDeadline(ctx, deadline.Add(5*time.Second))
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	for g := range b.conc {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				t0 := time.Now()
				lease, err := b.l.Acquire(cctx, name)
				if err != nil {
					errs <- fmt.Errorf("contended: %w", err)
					return
				}
				w := time.Since(t0)
				mu.Lock()
				n++
				if last >= 0 && last != g {
					other++
				}
				last = g
				maxWait = max(maxWait, w)
				mu.Unlock()
				if err := lease.Release(ctx); err != nil {
					errs <- fmt.Errorf("contended: %w", err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	r.contRate = float64(n) / time.Since(start).Seconds()
	r.maxWait = maxWait
	if n > 1 {
		r.handoff = float64(other) / float64(n-1)
	}
	return nil
}

func printBench(w io.Writer, rs []benchResult, conc int) {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', tabwriter.AlignRight)
	const labelWidth = 36 // the longest label, left-aligned by padding
	row := func(label string, cell func(r benchResult) string) {
		fmt.Fprintf(tw, "%-*s\t", labelWidth, label)
		for _, r := range rs {
			fmt.Fprintf(tw, "%s\t", cell(r))
		}
		fmt.Fprintln(tw)
	}
	row("", func(r benchResult) string { return r.backend })
	row("acquire p50", func(r benchResult) string { return fmtDur(r.acqP50) })
	row("acquire p99", func(r benchResult) string { return fmtDur(r.acqP99) })
	row("release p50", func(r benchResult) string { return fmtDur(r.relP50) })
	row("release p99", func(r benchResult) string { return fmtDur(r.relP99) })
	row("sequential cycles/s", func(r benchResult) string { return fmt.Sprintf("%.0f", r.seqRate) })
	row(fmt.Sprintf("parallel cycles/s (%d names)", conc), func(r benchResult) string { return fmt.Sprintf("%.0f", r.parRate) })
	row(fmt.Sprintf("contended acquisitions/s (%d on 1)", conc), func(r benchResult) string { return fmt.Sprintf("%.0f", r.contRate) })
	row("contended max wait", func(r benchResult) string { return fmtDur(r.maxWait) })
	row("handoffs to another goroutine", func(r benchResult) string { return fmt.Sprintf("%.0f%%", 100*r.handoff) })
	_ = tw.Flush()
}

// fmtDur prints a latency with three significant digits.
func fmtDur(d time.Duration) string {
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.3gs", d.Seconds())
	case d >= time.Millisecond:
		return fmt.Sprintf("%.3gms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%.3gµs", float64(d)/float64(time.Microsecond))
	}
}

// progress shows on stderr which phase runs: a line that updates itself on
// a terminal, one line per phase elsewhere.
type progress struct {
	w    io.Writer
	tty  bool
	stop chan struct{}
	wg   sync.WaitGroup
}

func newProgress(w io.Writer) *progress {
	p := &progress{w: w}
	if f, ok := w.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			p.tty = true
		}
	}
	return p
}

// phase announces a phase of d.
func (p *progress) phase(backend, what string, d time.Duration) {
	p.done()
	if !p.tty {
		fmt.Fprintf(p.w, "bench: %s: %s (%v)\n", backend, what, d)
		return
	}
	p.stop = make(chan struct{})
	start := time.Now()
	p.wg.Go(func() {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			pct := min(100, int(100*time.Since(start)/d))
			fmt.Fprintf(p.w, "\r\033[Kbench: %s: %s %3d%%", backend, what, pct)
			select {
			case <-p.stop:
				fmt.Fprint(p.w, "\r\033[K")
				return
			case <-t.C:
			}
		}
	})
}

// done ends the current phase's display.
func (p *progress) done() {
	if p.stop != nil {
		close(p.stop)
		p.wg.Wait()
		p.stop = nil
	}
}
