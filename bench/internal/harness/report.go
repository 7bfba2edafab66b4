package harness

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// Key names one measurement: context kind, implementation, scenario.
type Key struct{ Ctx, Impl, Scenario string }

// Results holds measurements by context kind, implementation and scenario.
type Results map[Key]Result

// Add records r.
func (rs Results) Add(r Result) { rs[Key{r.Ctx, r.Impl, r.Scenario}] = r }

// Get returns the result of impl in scenario under the context kind.
func (rs Results) Get(kind, impl, scenario string) (Result, bool) {
	r, ok := rs[Key{kind, impl, scenario}]
	return r, ok
}

// Combine merges the rounds of one implementation and scenario: the median
// of every metric, except MaxWait (the worst of all rounds), the per-worker
// minimum and maximum (the extremes) and the error counts (summed).
func Combine(rounds []Result) Result {
	if len(rounds) == 1 {
		return rounds[0]
	}
	out := rounds[0].zeroCounts()
	out.Rate = medianF(rounds, Result.OpsPerSec)
	out.AllocsPerOp = medianF(rounds, func(r Result) float64 { return r.AllocsPerOp })
	out.OtherPct = medianF(rounds, func(r Result) float64 { return r.OtherPct })
	out.P50 = medianD(rounds, func(r Result) time.Duration { return r.P50 })
	out.P99 = medianD(rounds, func(r Result) time.Duration { return r.P99 })
	out.HandoffP50 = medianD(rounds, func(r Result) time.Duration { return r.HandoffP50 })
	out.HandoffP99 = medianD(rounds, func(r Result) time.Duration { return r.HandoffP99 })
	out.HandoffCallP50 = medianD(rounds, func(r Result) time.Duration { return r.HandoffCallP50 })
	out.HandoffCallP99 = medianD(rounds, func(r Result) time.Duration { return r.HandoffCallP99 })
	for _, r := range rounds { // out starts from the first round's extremes
		out.addCounts(r)
		out.MaxWait = max(out.MaxWait, r.MaxWait)
		out.MinPerWorker = min(out.MinPerWorker, r.MinPerWorker)
		out.MaxPerWorker = max(out.MaxPerWorker, r.MaxPerWorker)
	}
	return out
}

func medianF(rs []Result, f func(Result) float64) float64 {
	return medianOf(rs, f)
}

// medianOf is the median of f over xs.
func medianOf[T any](xs []T, f func(T) float64) float64 {
	v := make([]float64, len(xs))
	for i, x := range xs {
		v[i] = f(x)
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

// WriteTables writes one markdown table per scenario, rows by context kind
// (in the order of kinds) and then in the order of impls.
func WriteTables(w io.Writer, rs Results, kinds, impls []string) {
	row := func(cells ...string) { fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | ")) }
	errs := func(r Result) string {
		return fmt.Sprintf("%d/%d", r.AcquireErrors, r.ReleaseErrors)
	}
	each := func(sc string, f func(kind, impl string, r Result)) bool {
		any := false
		for _, k := range kinds {
			for _, n := range impls {
				if r, ok := rs.Get(k, n, sc); ok {
					any = true
					if f != nil {
						f(k, n, r)
					}
				}
			}
		}
		return any
	}
	for _, sc := range []string{S1, S2} {
		if !each(sc, nil) {
			continue
		}
		if sc == S1 {
			fmt.Fprintf(w, "**S1** — 1 goroutine, acquire+release loop on one name\n\n")
		} else {
			fmt.Fprintf(w, "**S2** — %d goroutines, each its own name\n\n", S2Workers)
		}
		row("ctx", "impl", "ops/s", "p50 µs", "p99 µs", "allocs/op", "acq/rel errors")
		row("---", "---", "---:", "---:", "---:", "---:", "---:")
		each(sc, func(k, n string, r Result) {
			row(k, n, rate(r.OpsPerSec()), us(r.P50), us(r.P99), fmt.Sprintf("%.0f", r.AllocsPerOp), errs(r))
		})
		fmt.Fprintln(w)
	}
	if !each(S3, nil) {
		return
	}
	fmt.Fprintf(w, "**S3** — %d goroutines contending for one name (critical section: a counter increment)\n\n", S3Workers)
	row("ctx", "impl", "ops/s", "max wait ms", "wait p50 ms", "wait p99 ms", "handoff p50 µs", "handoff p99 µs",
		"handoff from release call p50/p99 µs", "to another %", "ops/worker min–max", "overlaps", "acq/rel errors")
	row("---", "---", "---:", "---:", "---:", "---:", "---:", "---:", "---:", "---:", "---:", "---:", "---:")
	each(S3, func(k, n string, r Result) {
		row(k, n, rate(r.OpsPerSec()), ms(r.MaxWait), ms(r.P50), ms(r.P99), us(r.HandoffP50), us(r.HandoffP99),
			us(r.HandoffCallP50)+" / "+us(r.HandoffCallP99),
			fmt.Sprintf("%.1f", r.OtherPct), fmt.Sprintf("%d–%d", r.MinPerWorker, r.MaxPerWorker),
			fmt.Sprint(r.ExclusionViolations), errs(r))
	})
}

// WriteErrors lists the first acquire and release errors of every
// measurement that had some.
func WriteErrors(w io.Writer, rs Results, kinds, impls []string) {
	first := true
	for _, k := range kinds {
		for _, n := range impls {
			for _, sc := range Scenarios {
				r, ok := rs.Get(k, n, sc)
				if !ok || (r.AcquireErrors == 0 && r.ReleaseErrors == 0) {
					continue
				}
				if first {
					fmt.Fprintf(w, "\nErrors (counted in the tables; acquires were retried, the wait going on):\n\n")
					first = false
				}
				if r.AcquireErrors > 0 {
					fmt.Fprintf(w, "- %s %s %s: %d failed acquires, first: %s\n", k, n, sc, r.AcquireErrors, r.FirstAcquireErr)
				}
				if r.ReleaseErrors > 0 {
					fmt.Fprintf(w, "- %s %s %s: %d failed releases, first: %s\n", k, n, sc, r.ReleaseErrors, r.FirstReleaseErr)
				}
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

// Verdict is PASS, FAIL or n/a (a side not measured).
func (t Target) Verdict() string {
	switch {
	case !t.Known:
		return "n/a"
	case t.Pass:
		return "PASS"
	}
	return "FAIL"
}

// Targets checks the goals on the results and the CPU costs under the
// context kind. A ratio is dlock's value divided by the peer's.
func Targets(rs Results, costs []Cost, kind string) []Target {
	var ts []Target
	get := func(impl, sc string) (Result, bool) { return rs.Get(kind, impl, sc) }
	ratio := func(x, y float64) float64 {
		if y == 0 {
			return 0
		}
		return x / y
	}
	// atLeast compares dlock's ops/s with a peer's.
	atLeast := func(goal, impl, sc string, want float64, peer string) {
		t := Target{Goal: goal}
		x, ok := get(impl, sc)
		y, ok2 := get(peer, sc)
		t.Known = ok && ok2
		if !t.Known {
			t.Detail = "not measured"
		} else {
			r := ratio(x.OpsPerSec(), y.OpsPerSec())
			t.Pass = r >= want
			t.Detail = fmt.Sprintf("%.2f× (%s vs %s)", r, rate(x.OpsPerSec()), rate(y.OpsPerSec()))
		}
		ts = append(ts, t)
	}
	atLeast("S1 ops/s: dlock-redis ≥ 1.0× bsm-redislock", DlockRedis, S1, 1.0, BSM)
	atLeast("S2 ops/s: dlock-redis ≥ 1.0× bsm-redislock", DlockRedis, S2, 1.0, BSM)
	atLeast("S2 ops/s: dlock-redis ≥ 0.9× raw-goredis", DlockRedis, S2, 0.9, Raw)

	t := Target{Goal: "Redis CPU per operation (cost pass): dlock-redis ≤ bsm-redislock", Detail: "not measured"}
	var x, y *Cost
	for i := range costs {
		switch c := &costs[i]; {
		case c.Ctx == kind && c.Impl == DlockRedis:
			x = c
		case c.Ctx == kind && c.Impl == BSM:
			y = c
		}
	}
	if x != nil && y != nil {
		t.Known, t.Pass = true, x.ServerPerOp <= y.ServerPerOp
		t.Detail = fmt.Sprintf("%.1f vs %.1f µs", float64(x.ServerPerOp)/1e3, float64(y.ServerPerOp)/1e3)
	}
	ts = append(ts, t)

	t = Target{Goal: "S1 allocs/op: dlock-redis ≤ bsm-redislock", Detail: "not measured"}
	if a, ok := get(DlockRedis, S1); ok {
		if b, ok := get(BSM, S1); ok {
			t.Known, t.Pass = true, a.AllocsPerOp <= b.AllocsPerOp
			t.Detail = fmt.Sprintf("%.0f vs %.0f", a.AllocsPerOp, b.AllocsPerOp)
		}
	}
	ts = append(ts, t)

	s3, ok := get(DlockRedis, S3)
	t = Target{Goal: "S3: dlock-redis ≥ 99% of handoffs to another waiter", Known: ok, Detail: "not measured"}
	if ok {
		t.Pass, t.Detail = s3.OtherPct >= 99, fmt.Sprintf("%.1f%%", s3.OtherPct)
	}
	ts = append(ts, t)
	t = Target{Goal: "S3: dlock-redis max wait ≤ 50 ms", Known: ok, Detail: "not measured"}
	if ok {
		t.Pass, t.Detail = s3.MaxWait <= 50*time.Millisecond, ms(s3.MaxWait)+" ms"
	}
	ts = append(ts, t)
	atLeast("S1 ops/s: dlock-redlock5 ≥ 1.3× redsync-5", DlockRedlock, S1, 1.3, Redsync5)
	atLeast("S2 ops/s: dlock-redlock5 ≥ 2.0× redsync-5", DlockRedlock, S2, 2.0, Redsync5)
	return ts
}

// WriteTargets writes the targets as a markdown table, a column per
// context kind, each cell the measured ratio or value and PASS/FAIL.
func WriteTargets(w io.Writer, rs Results, costs []Cost, kinds []string) {
	byKind := make([][]Target, len(kinds))
	for i, k := range kinds {
		byKind[i] = Targets(rs, costs, k)
	}
	fmt.Fprintf(w, "| target |")
	for _, k := range kinds {
		fmt.Fprintf(w, " %s |", k)
	}
	fmt.Fprintf(w, "\n|---|")
	for range kinds {
		fmt.Fprintf(w, "---|")
	}
	fmt.Fprintln(w)
	if len(kinds) == 0 {
		return
	}
	for j, t := range byKind[0] {
		fmt.Fprintf(w, "| %s |", t.Goal)
		for i := range kinds {
			c := byKind[i][j]
			fmt.Fprintf(w, " %s %s |", c.Detail, c.Verdict())
		}
		fmt.Fprintln(w)
	}
}
