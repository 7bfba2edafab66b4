// Benchmarks of dlock against its peers on the same Redis servers, and of
// dlock's nats:// backend against a raw jetstream KV loop on a nats-server
// of their own.
//
//	cd bench && go test -run '^$' -bench . -benchmem -count 5 > new.txt
//	benchstat -col /impl new.txt
//
// Sub-benchmarks are named ctx=<context kind>/impl=<implementation> so
// that benchstat can put the implementations side by side, a row per
// context kind. See README.md.
package bench_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockgo/dlock/bench/internal/harness"
)

var (
	sharedAddr = flag.String("redis", "127.0.0.1:6379", "address of the shared Redis server (loopback)")
	optIn      = flag.Bool("optin", false, "also run the diagnostic implementations (dlock-redis-driver and the others cmd/compare runs only when -impls names them)")
)

var (
	env   *harness.Env
	seq   atomic.Int64
	mu    sync.Mutex
	impls = map[string]harness.Impl{}
	warm  = map[string]bool{}
)

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	if !benchmarking() {
		return m.Run() // no servers needed
	}
	servers, err := harness.StartServers(5)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	defer harness.KillServers(servers)
	// The NATS implementations are not opt-in: a missing or old
	// nats-server fails the run, naming the script that installs one.
	ns, err := harness.StartNATS()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	defer ns.Kill()
	env = harness.NewEnv(*sharedAddr, harness.Addrs(servers), ns.Addr)
	code := m.Run()
	for _, im := range impls {
		_ = im.Close()
	}
	if _, err := harness.Cleanup(context.Background(), env); err != nil {
		fmt.Fprintln(os.Stderr, "bench: cleanup:", err)
	}
	return code
}

func benchmarking() bool {
	f := flag.Lookup("test.bench")
	return f != nil && f.Value.String() != ""
}

// impl returns the shared instance of s, made on first use.
func impl(b *testing.B, s harness.Spec) harness.Impl {
	mu.Lock()
	defer mu.Unlock()
	if im, ok := impls[s.Name]; ok {
		return im
	}
	im, err := s.New(env)
	if err != nil {
		b.Fatalf("%s: %v", s.Name, err)
	}
	impls[s.Name] = im
	return im
}

func bench(b *testing.B, scenario string, report func(b *testing.B, r harness.Result)) {
	for _, kind := range harness.CtxKinds {
		b.Run("ctx="+kind, func(b *testing.B) { benchKind(b, scenario, kind, report) })
	}
}

func benchKind(b *testing.B, scenario, kind string, report func(b *testing.B, r harness.Result)) {
	for _, s := range harness.Specs() {
		if s.OptIn && !*optIn {
			continue // diagnostics: -optin, or cmd/compare -impls, runs them
		}
		b.Run("impl="+s.Name, func(b *testing.B) {
			im := impl(b, s)
			if s.Private {
				if err := harness.FlushNodes(context.Background(), env); err != nil {
					b.Fatal(err)
				}
			}
			mu.Lock()
			first := !warm[s.Name+scenario+kind]
			warm[s.Name+scenario+kind] = true
			mu.Unlock()
			if first {
				harness.Run(scenario, im, env.Key(s.Name, scenario, kind+"-warm"), kind, harness.Budget{D: 300 * time.Millisecond}, harness.Hooks{})
			}
			key := env.Key(s.Name, scenario, fmt.Sprintf("%s-b%d", kind, seq.Add(1)))
			b.ReportAllocs()
			r := harness.Run(scenario, im, key, kind, harness.Budget{N: int64(b.N)}, harness.Hooks{Start: b.ResetTimer, Stop: b.StopTimer})
			if r.ExclusionViolations > 0 {
				b.Errorf("%d critical sections overlapped", r.ExclusionViolations)
			}
			if r.AcquireErrors > 0 || r.ReleaseErrors > 0 {
				b.Logf("N=%d: %d failed acquires (retried), %d failed releases", b.N, r.AcquireErrors, r.ReleaseErrors)
			}
			b.ReportMetric(r.OpsPerSec(), "ops/s")
			report(b, r)
		})
	}
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// BenchmarkS1: one goroutine, an acquire+release loop on one name.
func BenchmarkS1(b *testing.B) {
	bench(b, harness.S1, func(b *testing.B, r harness.Result) {
		b.ReportMetric(micros(r.P50), "p50-µs")
		b.ReportMetric(micros(r.P99), "p99-µs")
	})
}

// BenchmarkS2: 16 goroutines, each acquiring and releasing its own name;
// ns/op is wall time divided by all goroutines' operations.
func BenchmarkS2(b *testing.B) {
	bench(b, harness.S2, func(b *testing.B, r harness.Result) {
		b.ReportMetric(micros(r.P50), "p50-µs")
		b.ReportMetric(micros(r.P99), "p99-µs")
	})
}

// BenchmarkS3: 8 goroutines contending for one name; b.N acquisitions in
// all.
func BenchmarkS3(b *testing.B) {
	bench(b, harness.S3, func(b *testing.B, r harness.Result) {
		b.ReportMetric(millis(r.MaxWait), "maxwait-ms")
		b.ReportMetric(r.OtherPct, "other-%")
		b.ReportMetric(micros(r.HandoffP50), "handoff-p50-µs")
		b.ReportMetric(micros(r.HandoffP99), "handoff-p99-µs")
		b.ReportMetric(micros(r.HandoffCallP50), "handoff-call-p50-µs")
	})
}
