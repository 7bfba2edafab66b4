// Command scale runs the scaling sweeps of dlock bench --scale (waiters on
// one name, names held at once, clients on names of their own; see
// docs/SCALING.md) for dlock and its peers on the same Redis servers, and
// writes scale.csv and one SVG chart per sweep.
//
//	cd bench && go run ./cmd/scale -out ../docs/scaling/peers
//
// It starts 5 redis-server processes of its own (no persistence) on free
// loopback ports for the multi-node implementations, and kills them at the
// end. On the shared Redis (-redis) it only uses keys holding the run's
// unique id, and deletes them at the end.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/dlockgo/dlock/bench/internal/harness"
	"github.com/dlockgo/dlock/internal/redisutil"
	"github.com/dlockgo/dlock/internal/scale"
)

func main() { harness.Main("scale", run) }

func run() error {
	d := scale.DefaultConfig("")
	out := flag.String("out", "scale-peers", "directory for scale.csv and the charts")
	implFlags := harness.Flags()
	waiters := flag.String("waiters", scale.FormatInts(d.Waiters), "waiters on one name")
	held := flag.String("held", scale.FormatInts(d.Held), "names held at once (ascending)")
	clients := flag.String("clients", scale.FormatInts(d.Clients), "clients, each on a name of its own")
	flag.DurationVar(&d.Step, "step", d.Step, "duration of each point of the waiters and clients sweeps")
	flag.DurationVar(&d.Fill, "fill", d.Fill, "most time to reach each level of the held sweep")
	flag.IntVar(&d.Fleet, "fleet", d.Fleet, "clients (connections) a sweep spreads its goroutines over")
	flag.DurationVar(&harness.TTL, "ttl", 10*time.Minute, "the locks' TTL: long, so that the peers, which do not renew, hold their locks through the held sweep")
	flag.Parse()
	shared, specs, err := implFlags()
	if err != nil {
		return err
	}
	for _, l := range []struct {
		dst  *[]int
		flag string
	}{{&d.Waiters, *waiters}, {&d.Held, *held}, {&d.Clients, *clients}} {
		if *l.dst, err = parse(l.flag); err != nil {
			return err
		}
	}
	servers, err := harness.StartServers(5)
	if err != nil {
		return err
	}
	defer harness.KillServers(servers)
	var natsURL string
	if harness.NeedNATS(specs) {
		ns, err := harness.StartNATS()
		if err != nil {
			return err
		}
		defer ns.Kill()
		natsURL = ns.Addr
	}
	env := harness.NewEnv(shared, harness.Addrs(servers), natsURL)
	defer harness.CleanupAndReport(env)
	ctx := context.Background()
	var all []scale.Point
	for _, s := range specs {
		if s.Private {
			if err := harness.FlushNodes(ctx, env); err != nil {
				return err
			}
		}
		c := d
		c.Prefix = env.Key(s.Name, "scale", "") + "/"
		c.Progress = func(msg string) { fmt.Fprintln(os.Stderr, msg) }
		addrs := []string{env.Shared}
		if s.Private {
			addrs = env.Nodes
		}
		keys := redisKeys(addrs) // what the store keeps: keys
		if s.NATS {
			addrs, keys = []string{strings.TrimPrefix(env.NATS, "nats://")}, nil
		}
		t := scale.Target{
			Name:    s.Name,
			Servers: addrs,
			Entries: keys,
			Open:    func(context.Context) (scale.Locker, error) { return s.New(env) },
		}
		start := time.Now()
		ps, err := scale.Run(ctx, t, c)
		all = append(all, ps...)
		if err != nil {
			return fmt.Errorf("%s: %w", s.Name, err)
		}
		fmt.Fprintf(os.Stderr, "%s: sweeps done in %v\n", s.Name, time.Since(start).Round(time.Second))
	}
	if err := scale.WriteDir(*out, all); err != nil {
		return err
	}
	return scale.WriteCSV(os.Stdout, all)
}

// redisKeys counts the keys of the Redis servers at addrs (DBSIZE).
func redisKeys(addrs []string) func(context.Context) (int, error) {
	return func(ctx context.Context) (int, error) { return redisutil.KeyCount(ctx, addrs, "", "") }
}

func parse(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q: want a comma-separated list of whole numbers from 1", s)
		}
		out = append(out, n)
	}
	return out, nil
}
