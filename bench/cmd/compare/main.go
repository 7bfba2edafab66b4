// Command compare runs dlock's benchmark scenarios (S1, S2, S3) for dlock
// and its peers against the same Redis servers, under each kind of context
// given to the lock calls (context.Background(), a cancellable context
// without deadline, a 1 s timeout per call), and prints markdown tables and
// the target ratios with PASS/FAIL, by context kind.
//
//	cd bench && go run ./cmd/compare -d 3s
//
// It starts 5 redis-server processes of its own (no persistence) on free
// loopback ports for the multi-node implementations, a sixth for the
// CPU-cost pass and, when a NATS implementation is selected, a nats-server
// with JetStream (2.11 or later, see natsbin.Find), and kills them at the
// end. On the shared Redis (-redis) it only uses keys holding the run's
// unique id, and deletes them at the end; it never flushes it.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/dlockgo/dlock/bench/internal/harness"
	"github.com/dlockgo/dlock/internal/testenv/natsbin"
)

func main() { harness.Main("compare", run) }

// unit is one implementation under one context kind: what takes turns.
type unit struct{ impl, ctx string }

func run() error {
	d := flag.Duration("d", 3*time.Second, "measured duration of each scenario for each implementation and context kind")
	warm := flag.Duration("warmup", 500*time.Millisecond, "warm-up before each measurement (same scenario, another name)")
	implFlags := harness.Flags()
	scenList := flag.String("scenarios", "S1,S2,S3", "comma-separated scenarios")
	ctxList := flag.String("ctx", strings.Join(harness.CtxKinds, ","), "comma-separated context kinds of the lock calls: background (context.Background()), cancel (context.WithCancel, no deadline), timeout (context.WithTimeout 1s per call)")
	maxForeignFlag := flag.Float64("quiet", 0.15, "wait (up to -quiet-wait) until other processes use less than this share of a CPU before each measurement, and repeat a measurement (up to 3 times) during which they used more; 0 turns it off")
	quietWait := flag.Duration("quiet-wait", 2*time.Minute, "longest wait for a quiet machine before a measurement")
	quietTries := flag.Int("quiet-tries", 3, "most times a measurement is made while other processes were busy during it (the quietest is kept)")
	cost := flag.Duration("cost", 2*time.Second, "duration of the CPU-cost pass (S2 on private servers only, so that Redis's CPU per operation can be read); 0 skips it")
	rounds := flag.Int("rounds", 1, "rounds; the order rotates each round and metrics are medians (max wait: the worst)")
	slice := flag.Duration("slice", 250*time.Millisecond, "S1 and S2: every implementation under every context kind takes turns in slices of this length (the order rotating every slice) until each has run -d; the quiet guard applies to each turn of slices; 0 runs each for -d in one go, one after another")
	flag.Parse()

	shared, specs, err := implFlags()
	if err != nil {
		return err
	}
	scens := strings.Split(*scenList, ",")
	for _, s := range scens {
		if s != harness.S1 && s != harness.S2 && s != harness.S3 {
			return fmt.Errorf("unknown scenario %q", s)
		}
	}
	kinds := strings.Split(*ctxList, ",")
	for _, k := range kinds {
		if !harness.ValidCtx(k) {
			return fmt.Errorf("unknown context kind %q; known: %s", k, strings.Join(harness.CtxKinds, ", "))
		}
	}

	servers, err := harness.StartServers(6) // 5 masters + 1 for the cost pass
	if err != nil {
		return err
	}
	defer harness.KillServers(servers)
	costAddr := servers[5].Addr
	var natsURL, natsVer string
	natsPid := 0
	if harness.NeedNATS(specs) {
		_, natsVer, err = natsbin.Find()
		if err != nil {
			return err
		}
		ns, err := harness.StartNATS()
		if err != nil {
			return err
		}
		defer ns.Kill()
		servers = append(servers, ns) // killed with the others on a signal
		natsURL, natsPid = ns.Addr, ns.Pid()
	}
	sig := make(chan os.Signal, 1)
	env := harness.NewEnv(shared, harness.Addrs(servers[:5]), natsURL)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sig
		harness.KillServers(servers)
		// dlock keeps fencing counters for days: remove this run's keys.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, _ = harness.Cleanup(ctx, env)
		cancel()
		os.Exit(130)
	}()
	ctx := context.Background()
	impls := map[string]harness.Impl{}
	var order []string
	for _, s := range specs {
		im, err := s.New(env)
		if err != nil {
			fmt.Fprintf(os.Stderr, "skipping %s: %v\n", s.Name, err)
			continue
		}
		impls[s.Name] = im
		order = append(order, s.Name)
	}
	defer func() {
		for _, im := range impls {
			_ = im.Close()
		}
		harness.CleanupAndReport(env)
	}()
	var units []unit
	for _, k := range kinds {
		for _, n := range order {
			units = append(units, unit{n, k})
		}
	}

	private := map[string]bool{}
	for _, s := range specs {
		private[s.Name] = s.Private
	}
	exclude := map[int]bool{}
	for _, s := range servers {
		exclude[s.Pid()] = true
	}
	_, sharedPort, _ := net.SplitHostPort(shared)
	all := map[harness.Key][]harness.Result{}
	g := &quietGuard{exclude: exclude, port: sharedPort, limit: *maxForeignFlag, wait: *quietWait, tries: max(*quietTries, 1)}
	started := time.Now()
	for r := range *rounds {
		for _, sc := range scens {
			if *slice > 0 && sc != harness.S3 {
				// Sliced: every unit runs in turns.
				res, err := sliced(ctx, env, g, impls, units, private, sc, fmt.Sprintf("r%d", r), r, *d, *slice, *warm)
				if err != nil {
					return err
				}
				for _, u := range units {
					rs := res[u]
					rs.Impl, rs.Ctx = u.impl, u.ctx
					k := harness.Key{Ctx: u.ctx, Impl: u.impl, Scenario: sc}
					all[k] = append(all[k], rs)
					fmt.Fprintf(os.Stderr, "round %d %s %-10s %-15s %8.0f ops/s p50 %v p99 %v errors %d/%d (sliced)\n",
						r+1, sc, u.ctx, u.impl, rs.OpsPerSec(), rs.P50, rs.P99, rs.AcquireErrors, rs.ReleaseErrors)
				}
				continue
			}
			for i := range units {
				u := units[(i+r)%len(units)]
				im := impls[u.impl]
				if private[u.impl] {
					if err := harness.FlushNodes(ctx, env); err != nil {
						return err
					}
				}
				purpose := fmt.Sprintf("%s-r%d", u.ctx, r)
				if *warm > 0 {
					harness.Run(sc, im, env.Key(u.impl, sc, purpose+"-warm"), u.ctx, harness.Budget{D: *warm}, harness.Hooks{})
				}
				res, foreign, _ := quietly(g, fmt.Sprintf("round %d %s %s %s", r+1, sc, u.ctx, u.impl), func(attempt int) (harness.Result, error) {
					return harness.Run(sc, im, env.Key(u.impl, sc, fmt.Sprintf("%s-a%d", purpose, attempt)), u.ctx, harness.Budget{D: *d}, harness.Hooks{}), nil
				})
				res.Impl = u.impl
				k := harness.Key{Ctx: u.ctx, Impl: u.impl, Scenario: sc}
				all[k] = append(all[k], res)
				fmt.Fprintf(os.Stderr, "round %d %s %-10s %-15s %8.0f ops/s p50 %v p99 %v maxwait %v other %.1f%% errors %d/%d overlaps %d; other processes %.2f CPU\n",
					r+1, sc, u.ctx, u.impl, res.OpsPerSec(), res.P50, res.P99, res.MaxWait, res.OtherPct,
					res.AcquireErrors, res.ReleaseErrors, res.ExclusionViolations, foreign)
			}
		}
	}

	// The cost pass runs once per round too, every implementation under
	// every kind in each; its figures are the medians of the rounds.
	var costs []harness.Cost
	if *cost > 0 {
		type key struct{ kind, impl string }
		byKey := map[key][]harness.Cost{}
		for r := range *rounds {
			for _, k := range kinds {
				for _, s := range specs {
					if _, ok := impls[s.Name]; !ok {
						continue
					}
					if g.limit > 0 {
						waitQuiet(exclude, sharedPort, g.limit, g.wait)
					}
					c, err := harness.MeasureCost(ctx, s, env, costAddr, natsPid, k, *cost)
					if err != nil {
						fmt.Fprintf(os.Stderr, "cost of %s %s: %v\n", k, s.Name, err)
						continue
					}
					fmt.Fprintf(os.Stderr, "round %d cost %-10s %-15s %8.0f ops/s client %v/op server %v/op\n", r+1, k, s.Name, c.OpsPerSec, c.ClientPerOp, c.ServerPerOp)
					byKey[key{k, s.Name}] = append(byKey[key{k, s.Name}], c)
				}
			}
		}
		for _, k := range kinds {
			for _, s := range specs {
				if cs := byKey[key{k, s.Name}]; len(cs) > 0 {
					costs = append(costs, harness.MedianCost(cs))
				}
			}
		}
	}

	results := harness.Results{}
	for _, rs := range all {
		results.Add(harness.Combine(rs))
	}
	w := os.Stdout
	fmt.Fprintf(w, "## dlock benchmark comparison\n\n")
	fmt.Fprintf(w, "- date: %s – %s\n", started.UTC().Format("2006-01-02 15:04"), time.Now().UTC().Format("15:04 UTC"))
	fmt.Fprintf(w, "- command: `go run ./cmd/compare %s`\n", strings.Join(os.Args[1:], " "))
	fmt.Fprintf(w, "- machine: %d CPUs (GOMAXPROCS %d), %s/%s, %s\n", runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.GOOS, runtime.GOARCH, runtime.Version())
	fmt.Fprintf(w, "- Redis: %s; shared server %s (keys of this run only), 5 private redis-servers on loopback (--save \"\" --appendonly no)\n", redisVersion(), shared)
	if natsURL != "" {
		fmt.Fprintf(w, "- NATS: a private nats-server %s on loopback, JetStream with file storage in a temporary directory; a bucket per implementation (one replica)\n", natsVer)
	}
	fmt.Fprintf(w, "- context kinds of the lock calls (a new context per call): %s\n", strings.Join(kinds, ", "))
	fmt.Fprintf(w, "- each scenario: %v warm-up, then %v measured, per implementation and context kind; %d round(s)\n", *warm, *d, *rounds)
	if *slice > 0 {
		fmt.Fprintf(w, "- S1 and S2 sliced: every implementation under every context kind takes turns in %v slices (order rotating every slice) until each has run %v; S3 runs each for %v in one go\n", *slice, *d, *d)
	} else {
		fmt.Fprintf(w, "- every scenario runs each implementation under each context kind for %v in one go, one after another\n", *d)
	}
	fmt.Fprintf(w, "- TTL %v for every implementation; dlock opened from its URL, automatic renewal on (default); peers on go-redis clients with default options, raw-jetstream on a nats.go connection with default options\n", harness.TTL)
	fmt.Fprintf(w, "- peers' waiting: bsm/redislock ExponentialBackoff(%v, %v); redsync defaults (32 tries, 50–250 ms); raw loops (raw-goredis, raw-jetstream) fixed %v\n",
		harness.BSMMinBackoff, harness.BSMMaxBackoff, harness.RawRetry)
	fmt.Fprintf(w, "- other processes on the machine (not this one, its redis-servers and nats-server, or the shared Redis) used at most %.2f CPU during any kept measurement (threshold %.2f, at most %d tries; %d measurements repeated because of them)\n", g.maxForeign, g.limit, g.tries, g.repeats)
	fmt.Fprintln(w)
	harness.WriteTables(w, results, kinds, order)
	harness.WriteErrors(w, results, kinds, order)
	if len(costs) > 0 {
		fmt.Fprintf(w, "\n")
		harness.WriteCosts(w, costs, *cost)
	}
	fmt.Fprintf(w, "\n### Targets\n\n")
	harness.WriteTargets(w, results, costs, kinds)
	return nil
}

// quietGuard keeps other processes' CPU use out of the measurements.
type quietGuard struct {
	exclude map[int]bool // this run's servers
	port    string       // the shared Redis's port
	limit   float64      // most CPU other processes may use during a kept measurement; 0: no guard
	wait    time.Duration
	tries   int // most measurements of one thing

	repeats    int     // measurements repeated because of other processes
	maxForeign float64 // most CPU other processes used during a kept measurement
}

// quietly waits for a quiet machine and runs measure, up to g.tries times
// while other processes used more than g.limit of a CPU during it, and
// returns the run during which they used the least, with that use. label
// names the measurement in the progress output.
func quietly[T any](g *quietGuard, label string, measure func(attempt int) (T, error)) (T, float64, error) {
	var best T
	foreign := -1.0
	for attempt := 1; ; attempt++ {
		if g.limit > 0 {
			waitQuiet(g.exclude, g.port, g.limit, g.wait)
		}
		before := snapshotForeign(g.exclude, g.port)
		res, err := measure(attempt)
		if err != nil {
			return best, 0, err
		}
		f := foreignCPU(before, snapshotForeign(g.exclude, g.port))
		if foreign < 0 || f < foreign {
			best, foreign = res, f
		}
		if g.limit <= 0 || f <= g.limit || attempt >= g.tries {
			break
		}
		g.repeats++
		fmt.Fprintf(os.Stderr, "%s: other processes used %.2f CPU; measuring again\n", label, f)
	}
	g.maxForeign = max(g.maxForeign, foreign)
	return best, foreign, nil
}

// sliced runs scenario sc (S1 or S2) for every unit in turns: after a
// warm-up of each (the private nodes flushed once before), turns of one
// slice of every unit, the order rotating, until each unit has run about
// d, each turn guarded by g (see quietly). It returns each unit's slices
// merged.
func sliced(ctx context.Context, env *harness.Env, g *quietGuard, impls map[string]harness.Impl, units []unit, private map[string]bool,
	sc, purpose string, round int, d, slice, warm time.Duration) (map[unit]harness.Result, error) {
	for _, u := range units {
		if private[u.impl] {
			if err := harness.FlushNodes(ctx, env); err != nil {
				return nil, err
			}
			break
		}
	}
	if warm > 0 {
		for _, u := range units {
			harness.Run(sc, impls[u.impl], env.Key(u.impl, sc, u.ctx+"-"+purpose+"-warm"), u.ctx, harness.Budget{D: warm}, harness.Hooks{})
		}
	}
	n := max(int((d+slice-1)/slice), 1)
	parts := map[unit][]harness.Result{}
	for k := range n {
		turn, foreign, err := quietly(g, fmt.Sprintf("round %d %s turn %d/%d", round+1, sc, k+1, n), func(attempt int) (map[unit]harness.Result, error) {
			out := map[unit]harness.Result{}
			for i := range units {
				u := units[(i+k+round)%len(units)]
				key := env.Key(u.impl, sc, fmt.Sprintf("%s-%s-s%d-a%d", u.ctx, purpose, k, attempt))
				out[u] = harness.Run(sc, impls[u.impl], key, u.ctx, harness.Budget{D: slice}, harness.Hooks{})
			}
			return out, nil
		})
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(os.Stderr, "round %d %s turn %d/%d done; other processes %.2f CPU\n", round+1, sc, k+1, n, foreign)
		for u, r := range turn {
			parts[u] = append(parts[u], r)
		}
	}
	out := map[unit]harness.Result{}
	for u, p := range parts {
		out[u] = harness.Merge(p)
	}
	return out, nil
}

func redisVersion() string {
	out, err := exec.Command("redis-server", "--version").Output()
	if err != nil {
		return "unknown"
	}
	for f := range strings.FieldsSeq(string(out)) {
		if v, ok := strings.CutPrefix(f, "v="); ok {
			return "redis-server " + v
		}
	}
	return strings.TrimSpace(string(out))
}
