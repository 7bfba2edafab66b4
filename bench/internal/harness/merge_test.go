package harness

import (
	"testing"
	"time"
)

// Merge adds operations, time and CPU, weighs allocations by operations
// and takes percentiles over every slice's latencies together.
func TestMerge(t *testing.T) {
	us := func(n ...int) []time.Duration {
		var d []time.Duration
		for _, x := range n {
			d = append(d, time.Duration(x)*time.Microsecond)
		}
		return d
	}
	a := Result{Impl: "x", Scenario: S1, Ops: 2, Elapsed: time.Second, ClientCPU: time.Millisecond,
		AllocsPerOp: 10, Latencies: us(1, 2), AcquireErrors: 1}
	b := Result{Impl: "x", Scenario: S1, Ops: 3, Elapsed: 2 * time.Second, ClientCPU: 2 * time.Millisecond,
		AllocsPerOp: 20, Latencies: us(30, 40, 50), ReleaseErrors: 2, FirstReleaseErr: "boom"}
	m := Merge([]Result{a, b})
	if m.Ops != 5 || m.Elapsed != 3*time.Second || m.ClientCPU != 3*time.Millisecond {
		t.Errorf("ops %d elapsed %v cpu %v; want 5, 3s, 3ms", m.Ops, m.Elapsed, m.ClientCPU)
	}
	if m.AllocsPerOp != 16 {
		t.Errorf("allocs/op %v, want 16 ((2×10+3×20)/5)", m.AllocsPerOp)
	}
	if m.P50 != 30*time.Microsecond || m.P99 != 50*time.Microsecond {
		t.Errorf("p50 %v p99 %v; want 30µs, 50µs", m.P50, m.P99)
	}
	if m.AcquireErrors != 1 || m.ReleaseErrors != 2 || m.FirstReleaseErr != "boom" {
		t.Errorf("errors %d/%d %q", m.AcquireErrors, m.ReleaseErrors, m.FirstReleaseErr)
	}
	if m.OpsPerSec() != 5.0/3 {
		t.Errorf("ops/s %v, want 5/3", m.OpsPerSec())
	}
}
