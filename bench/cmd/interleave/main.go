// Command interleave measures S1 (one goroutine, acquire+release of one
// name) for several implementations at once, interleaving their
// operations: round i runs one acquire+release of each implementation, in
// an order that rotates every round. Machine noise (another process, a
// slower minute) then falls on every implementation alike, so the
// comparison of their latency percentiles is steadier than that of runs
// made one after another. It uses the shared Redis server only.
//
//	cd bench && go run ./cmd/interleave -n 50000 -impls dlock-redis,redsync-1,raw-goredis
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/dlockgo/dlock/bench/internal/harness"
)

func main() {
	n := flag.Int("n", 50000, "rounds (one acquire+release of each implementation per round)")
	warm := flag.Int("warmup", 2000, "rounds run first and not counted")
	list := flag.String("impls", "dlock-redis,redsync-1,raw-goredis", "comma-separated implementations (those on the shared server)")
	addr := flag.String("redis", "127.0.0.1:6379", "address of the shared Redis server (loopback only)")
	flag.Parse()
	if err := run(*n, *warm, *list, *addr); err != nil {
		fmt.Fprintln(os.Stderr, "interleave:", err)
		os.Exit(1)
	}
}

func run(n, warm int, list, addr string) error {
	if err := harness.Loopback(addr); err != nil {
		return err
	}
	specs, err := harness.Select(list)
	if err != nil {
		return err
	}
	env := harness.NewEnv(addr, nil)
	defer harness.Cleanup(context.Background(), env)
	impls := make([]harness.Impl, len(specs))
	keys := make([]string, len(specs))
	for i, s := range specs {
		if s.Private {
			return fmt.Errorf("%s needs the private nodes; interleave uses the shared server only", s.Name)
		}
		im, err := s.New(env)
		if err != nil {
			return fmt.Errorf("%s: %w", s.Name, err)
		}
		defer im.Close()
		impls[i] = im
		keys[i] = env.Key(s.Name, "S1i", "")
	}
	ctx := context.Background()
	lats := make([][]time.Duration, len(specs))
	for i := range lats {
		lats[i] = make([]time.Duration, 0, n)
	}
	for r := -warm; r < n; r++ {
		for k := range impls {
			i := (k + r + warm) % len(impls)
			t0 := time.Now()
			h, err := impls[i].Acquire(ctx, keys[i])
			if err != nil {
				return fmt.Errorf("%s: acquire: %w", specs[i].Name, err)
			}
			if err := h.Release(ctx); err != nil {
				return fmt.Errorf("%s: release: %w", specs[i].Name, err)
			}
			if r >= 0 {
				lats[i] = append(lats[i], time.Since(t0))
			}
		}
	}
	fmt.Printf("| impl | p10 µs | p50 µs | p90 µs | p99 µs | mean µs |\n|---|---:|---:|---:|---:|---:|\n")
	for i, s := range specs {
		l := lats[i]
		var sum time.Duration
		for _, d := range l {
			sum += d
		}
		slices.Sort(l)
		p := func(q float64) float64 { return float64(l[int(q*float64(len(l)-1))]) / 1e3 }
		fmt.Printf("| %s | %.1f | %.1f | %.1f | %.1f | %.1f |\n", s.Name, p(0.10), p(0.50), p(0.90), p(0.99), float64(sum)/float64(len(l))/1e3)
	}
	return nil
}
