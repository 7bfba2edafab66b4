package harness

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// Results holds measurements by implementation and scenario.
type Results map[string]map[string]Result

// Add records r.
func (rs Results) Add(r Result) {
	if rs[r.Impl] == nil {
		rs[r.Impl] = map[string]Result{}
	}
	rs[r.Impl][r.Scenario] = r
}

// Get returns the result of impl in scenario.
func (rs Results) Get(impl, scenario string) (Result, bool) {
	r, ok := rs[impl][scenario]
	return r, ok
}

// Combine merges the rounds of one implementation and scenario: the median
// of every metric, except MaxWait (the worst of all rounds), the per-worker
// minimum and maximum (the extremes) and the error counts (summed).
func Combine(rounds []Result) Result {
	if len(rounds) == 1 {
		return rounds[0]
	}
	out := rounds[0]
	out.Ops, out.Elapsed = 0, 0
	for _, r := range rounds {
		out.Ops += r.Ops
		out.Elapsed += r.Elapsed
	}
	out.Rate = medianF(rounds, Result.OpsPerSec)
	out.AllocsPerOp = medianF(rounds, func(r Result) float64 { return r.AllocsPerOp })
	out.OtherPct = medianF(rounds, func(r Result) float64 { return r.OtherPct })
	out.P50 = medianD(rounds, func(r Result) time.Duration { return r.P50 })
	out.P99 = medianD(rounds, func(r Result) time.Duration { return r.P99 })
	out.HandoffP50 = medianD(rounds, func(r Result) time.Duration { return r.HandoffP50 })
	out.HandoffP99 = medianD(rounds, func(r Result) time.Duration { return r.HandoffP99 })
	out.HandoffCallP50 = medianD(rounds, func(r Result) time.Duration { return r.HandoffCallP50 })
	out.HandoffCallP99 = medianD(rounds, func(r Result) time.Duration { return r.HandoffCallP99 })
	out.AcquireErrors, out.ReleaseErrors, out.ExclusionViolations, out.Handoffs = 0, 0, 0, 0
	for i, r := range rounds {
		out.MaxWait = max(out.MaxWait, r.MaxWait)
		if i == 0 || r.MinPerWorker < out.MinPerWorker {
			out.MinPerWorker = r.MinPerWorker
		}
		out.MaxPerWorker = max(out.MaxPerWorker, r.MaxPerWorker)
		out.AcquireErrors += r.AcquireErrors
		out.ReleaseErrors += r.ReleaseErrors
		out.ExclusionViolations += r.ExclusionViolations
		out.Handoffs += r.Handoffs
		if out.FirstAcquireErr == "" {
			out.FirstAcquireErr = r.FirstAcquireErr
		}
		if out.FirstReleaseErr == "" {
			out.FirstReleaseErr = r.FirstReleaseErr
		}
	}
	return out
}

func medianF(rs []Result, f func(Result) float64) float64 {
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = f(r)
	}
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

func medianD(rs []Result, f func(Result) time.Duration) time.Duration {
	return time.Duration(medianF(rs, func(r Result) float64 { return float64(f(r)) }))
}

func us(d time.Duration) string {
	if d < 0 {
		return "–"
	}
	return fmt.Sprintf("%.0f", float64(d)/float64(time.Microsecond))
}

func ms(d time.Duration) string {
	if d < 0 {
		return "–"
	}
	return fmt.Sprintf("%.1f", float64(d)/float64(time.Millisecond))
}

func rate(f float64) string { return fmt.Sprintf("%.0f", f) }

// WriteTables writes one markdown table per scenario, rows in the order of
// impls.
func WriteTables(w io.Writer, rs Results, impls []string) {
	row := func(cells ...string) { fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | ")) }
	errs := func(r Result) string {
		return fmt.Sprintf("%d/%d", r.AcquireErrors, r.ReleaseErrors)
	}

	has := func(sc string) bool {
		for _, n := range impls {
			if _, ok := rs.Get(n, sc); ok {
				return true
			}
		}
		return false
	}
	if has(S1) {
		fmt.Fprintf(w, "**S1** — 1 goroutine, acquire+release loop on one name\n\n")
		row("impl", "ops/s", "p50 µs", "p99 µs", "allocs/op", "acq/rel errors")
		row("---", "---:", "---:", "---:", "---:", "---:")
		for _, n := range impls {
			if r, ok := rs.Get(n, S1); ok {
				row(n, rate(r.OpsPerSec()), us(r.P50), us(r.P99), fmt.Sprintf("%.0f", r.AllocsPerOp), errs(r))
			}
		}
		fmt.Fprintln(w)
	}

	if has(S2) {
		fmt.Fprintf(w, "**S2** — %d goroutines, each its own name\n\n", S2Workers)
		row("impl", "ops/s", "p50 µs", "p99 µs", "allocs/op", "acq/rel errors")
		row("---", "---:", "---:", "---:", "---:", "---:")
		for _, n := range impls {
			if r, ok := rs.Get(n, S2); ok {
				row(n, rate(r.OpsPerSec()), us(r.P50), us(r.P99), fmt.Sprintf("%.0f", r.AllocsPerOp), errs(r))
			}
		}
		fmt.Fprintln(w)
	}

	if !has(S3) {
		return
	}
	fmt.Fprintf(w, "**S3** — %d goroutines contending for one name (critical section: a counter increment)\n\n", S3Workers)
	row("impl", "ops/s", "max wait ms", "wait p50 ms", "wait p99 ms", "handoff p50 µs", "handoff p99 µs",
		"handoff from release call p50/p99 µs", "to another %", "ops/worker min–max", "overlaps", "acq/rel errors")
	row("---", "---:", "---:", "---:", "---:", "---:", "---:", "---:", "---:", "---:", "---:", "---:")
	for _, n := range impls {
		if r, ok := rs.Get(n, S3); ok {
			row(n, rate(r.OpsPerSec()), ms(r.MaxWait), ms(r.P50), ms(r.P99), us(r.HandoffP50), us(r.HandoffP99),
				us(r.HandoffCallP50)+" / "+us(r.HandoffCallP99),
				fmt.Sprintf("%.1f", r.OtherPct), fmt.Sprintf("%d–%d", r.MinPerWorker, r.MaxPerWorker),
				fmt.Sprint(r.ExclusionViolations), errs(r))
		}
	}
}

// WriteErrors lists the first acquire and release errors of every
// measurement that had some.
func WriteErrors(w io.Writer, rs Results, impls []string) {
	first := true
	for _, n := range impls {
		for _, sc := range Scenarios {
			r, ok := rs.Get(n, sc)
			if !ok || (r.AcquireErrors == 0 && r.ReleaseErrors == 0) {
				continue
			}
			if first {
				fmt.Fprintf(w, "\nErrors (counted in the tables; acquires were retried):\n\n")
				first = false
			}
			if r.AcquireErrors > 0 {
				fmt.Fprintf(w, "- %s %s: %d failed acquires, first: %s\n", n, sc, r.AcquireErrors, r.FirstAcquireErr)
			}
			if r.ReleaseErrors > 0 {
				fmt.Fprintf(w, "- %s %s: %d failed releases, first: %s\n", n, sc, r.ReleaseErrors, r.FirstReleaseErr)
			}
		}
	}
}

// A Target is one of the goals, checked on measured results.
type Target struct {
	Goal   string
	Detail string
	Known  bool // both sides were measured
	Pass   bool
}

// Targets checks the goals on rs.
func Targets(rs Results) []Target {
	var ts []Target
	cmp := func(goal, a, b, scenario string, f func(x, y Result) (bool, string)) {
		x, okx := rs.Get(a, scenario)
		y, oky := rs.Get(b, scenario)
		t := Target{Goal: goal, Known: okx && oky}
		if t.Known {
			t.Pass, t.Detail = f(x, y)
		} else {
			t.Detail = "not measured"
		}
		ts = append(ts, t)
	}
	one := func(goal, a, scenario string, f func(x Result) (bool, string)) {
		x, ok := rs.Get(a, scenario)
		t := Target{Goal: goal, Known: ok}
		if ok {
			t.Pass, t.Detail = f(x)
		} else {
			t.Detail = "not measured"
		}
		ts = append(ts, t)
	}
	ratio := func(x, y float64) float64 {
		if y == 0 {
			return 0
		}
		return x / y
	}

	cmp("S1 p50: dlock-redis ≤ redsync-1", DlockRedis, Redsync1, S1, func(x, y Result) (bool, string) {
		return x.P50 <= y.P50, fmt.Sprintf("%s µs vs %s µs (%.2f×)", us(x.P50), us(y.P50), ratio(float64(x.P50), float64(y.P50)))
	})
	cmp("S2 ops/s: dlock-redis ≥ 1.0× raw-goredis", DlockRedis, Raw, S2, func(x, y Result) (bool, string) {
		r := ratio(x.OpsPerSec(), y.OpsPerSec())
		return r >= 1.0, fmt.Sprintf("%s vs %s ops/s (%.2f×)", rate(x.OpsPerSec()), rate(y.OpsPerSec()), r)
	})
	one("S3 max wait: dlock-redis ≤ 50 ms", DlockRedis, S3, func(x Result) (bool, string) {
		return x.MaxWait <= 50*time.Millisecond, ms(x.MaxWait) + " ms"
	})
	one("S3 handoffs: dlock-redis ≥ 90% to another waiter", DlockRedis, S3, func(x Result) (bool, string) {
		return x.OtherPct >= 90, fmt.Sprintf("%.1f%%", x.OtherPct)
	})
	cmp("S3 ops/s: dlock-redis ≥ 0.7× redsync-1", DlockRedis, Redsync1, S3, func(x, y Result) (bool, string) {
		r := ratio(x.OpsPerSec(), y.OpsPerSec())
		return r >= 0.7, fmt.Sprintf("%s vs %s ops/s (%.2f×)", rate(x.OpsPerSec()), rate(y.OpsPerSec()), r)
	})
	cmp("S1 ops/s: dlock-redlock5 (fencing) ≥ 1.0× redsync-5", DlockRedlock, Redsync5, S1, func(x, y Result) (bool, string) {
		r := ratio(x.OpsPerSec(), y.OpsPerSec())
		return r >= 1.0, fmt.Sprintf("%s vs %s ops/s (%.2f×)", rate(x.OpsPerSec()), rate(y.OpsPerSec()), r)
	})
	cmp("S2 ops/s: dlock-redlock5 (fencing) ≥ 1.5× redsync-5", DlockRedlock, Redsync5, S2, func(x, y Result) (bool, string) {
		r := ratio(x.OpsPerSec(), y.OpsPerSec())
		return r >= 1.5, fmt.Sprintf("%s vs %s ops/s (%.2f×)", rate(x.OpsPerSec()), rate(y.OpsPerSec()), r)
	})
	return ts
}

// WriteTargets writes the targets as a markdown table with PASS/FAIL.
func WriteTargets(w io.Writer, ts []Target) {
	fmt.Fprintf(w, "| target | measured | result |\n|---|---|---|\n")
	for _, t := range ts {
		res := "FAIL"
		switch {
		case !t.Known:
			res = "n/a"
		case t.Pass:
			res = "PASS"
		}
		fmt.Fprintf(w, "| %s | %s | %s |\n", t.Goal, t.Detail, res)
	}
}
