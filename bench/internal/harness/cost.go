package harness

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cost is the CPU an implementation spends per operation in S2, on the
// client (this whole process) and on the servers it uses (Redis's or the
// nats-server). On a small machine where client and servers share the
// CPUs, their sum bounds the throughput.
type Cost struct {
	Impl, Ctx   string
	OpsPerSec   float64
	ClientPerOp time.Duration
	ServerPerOp time.Duration // summed over the nodes the implementation uses
	// Commands is true when the figures below were read, from Redis's
	// INFO commandstats; a nats-server has none.
	Commands bool
	// From INFO commandstats, all nodes summed, per operation: the script
	// calls (EVAL, EVALSHA) and the time Redis spent in them (their inner
	// commands included), and the other commands and their time. Redis
	// counts a command a script calls on its own too, so the other
	// commands include those (and their time is then in both).
	Scripts, Others        float64
	ScriptTime, OthersTime time.Duration
	Nodes                  int
}

// MeasureCost runs S2 for d, lock calls with contexts of the kind, with a
// fresh instance of s whose servers are all private, so that their CPU is
// the implementation's alone: a Redis implementation's single-node server
// is redisAddr, not the shared one, its CPU read from INFO cpu; a NATS
// implementation's is the benchmark's nats-server, process natsPid, its
// CPU read from /proc.
func MeasureCost(ctx context.Context, s Spec, e *Env, redisAddr string, natsPid int, kind string, d time.Duration) (Cost, error) {
	ce := &Env{Shared: redisAddr, Nodes: e.Nodes, NATS: e.NATS, Run: e.Run}
	addrs := []string{redisAddr}
	if s.Private {
		addrs = e.Nodes
	}
	serverCPU := func() (time.Duration, error) { return ServerCPU(ctx, addrs) }
	if s.NATS {
		addrs = nil
		serverCPU = func() (time.Duration, error) { return ProcessCPU(natsPid) }
	} else {
		err := eachNode(append([]string{redisAddr}, e.Nodes...), func(c *redis.Client) error { return c.FlushAll(ctx).Err() })
		if err != nil {
			return Cost{}, err
		}
	}
	im, err := s.New(ce)
	if err != nil {
		return Cost{}, err
	}
	defer im.Close()
	Run(S2, im, ce.Key(s.Name, "cost", kind+"-warm"), kind, Budget{D: d / 4}, Hooks{})
	if err := eachNode(addrs, func(c *redis.Client) error { return c.ConfigResetStat(ctx).Err() }); err != nil {
		return Cost{}, err
	}
	s0, err := serverCPU()
	if err != nil {
		return Cost{}, err
	}
	r := Run(S2, im, ce.Key(s.Name, "cost", kind), kind, Budget{D: d}, Hooks{})
	s1, err := serverCPU()
	if err != nil {
		return Cost{}, err
	}
	if r.Ops == 0 {
		return Cost{}, fmt.Errorf("no operations")
	}
	c := Cost{
		Impl:        s.Name,
		Ctx:         kind,
		OpsPerSec:   r.OpsPerSec(),
		ClientPerOp: r.ClientCPU / time.Duration(r.Ops),
		ServerPerOp: (s1 - s0) / time.Duration(r.Ops),
		Nodes:       max(len(addrs), 1),
	}
	if s.NATS {
		return c, nil
	}
	// INFO itself and CONFIG are not the implementation's.
	st, err := commandStats(ctx, addrs)
	if err != nil {
		return Cost{}, err
	}
	perOp := func(usec float64) time.Duration {
		return time.Duration(usec * float64(time.Microsecond) / float64(r.Ops))
	}
	c.Commands = true
	c.Scripts, c.Others = st.scripts/float64(r.Ops), st.others/float64(r.Ops)
	c.ScriptTime, c.OthersTime = perOp(st.scriptUsec), perOp(st.otherUsec)
	return c, nil
}

type cmdStats struct{ scripts, others, scriptUsec, otherUsec float64 }

// commandStats sums INFO commandstats over the servers at addrs, scripts
// (EVAL, EVALSHA) apart, without INFO and CONFIG (the harness's own).
func commandStats(ctx context.Context, addrs []string) (cmdStats, error) {
	var st cmdStats
	return st, eachNode(addrs, func(c *redis.Client) error {
		info, err := c.Info(ctx, "commandstats").Result()
		if err != nil {
			return err
		}
		for _, l := range strings.Split(info, "\n") {
			// cmdstat_evalsha:calls=10,usec=25,usec_per_call=2.50,...
			name, rest, ok := strings.Cut(strings.TrimSpace(l), ":")
			name, isCmd := strings.CutPrefix(name, "cmdstat_")
			if !ok || !isCmd || name == "info" || name == "config" || strings.HasPrefix(name, "config|") {
				continue
			}
			var calls, usec float64
			for f := range strings.SplitSeq(rest, ",") {
				k, v, _ := strings.Cut(f, "=")
				n, _ := strconv.ParseFloat(v, 64)
				switch k {
				case "calls":
					calls = n
				case "usec":
					usec = n
				}
			}
			if slices.Contains([]string{"eval", "evalsha", "eval_ro", "evalsha_ro"}, name) {
				st.scripts += calls
				st.scriptUsec += usec
			} else {
				st.others += calls
				st.otherUsec += usec
			}
		}
		return nil
	})
}

// MedianCost is the median of each figure of cs, measurements of one
// implementation under one context kind (cs[0]'s names and node count).
func MedianCost(cs []Cost) Cost {
	med := func(f func(Cost) float64) float64 { return medianOf(cs, f) }
	d := func(f func(Cost) time.Duration) time.Duration {
		return time.Duration(med(func(c Cost) float64 { return float64(f(c)) }))
	}
	out := cs[0]
	out.OpsPerSec = med(func(c Cost) float64 { return c.OpsPerSec })
	out.ClientPerOp = d(func(c Cost) time.Duration { return c.ClientPerOp })
	out.ServerPerOp = d(func(c Cost) time.Duration { return c.ServerPerOp })
	out.Scripts = med(func(c Cost) float64 { return c.Scripts })
	out.Others = med(func(c Cost) float64 { return c.Others })
	out.ScriptTime = d(func(c Cost) time.Duration { return c.ScriptTime })
	out.OthersTime = d(func(c Cost) time.Duration { return c.OthersTime })
	return out
}

// WriteCosts writes the CPU-cost table.
func WriteCosts(w io.Writer, cs []Cost, d time.Duration) {
	fmt.Fprintf(w, "**CPU per operation** — S2 again for %v in each round (the medians of the rounds), every server private (so the servers' CPU is this implementation's alone): Redis's from INFO cpu, the nats-server's from /proc/<pid>/stat (10 ms ticks); the Redis command counts and times are from INFO commandstats, where a script's time includes the commands it calls, and those are also counted among the other commands (– for the nats-server, which has no such counts)\n\n", d)
	fmt.Fprintf(w, "| ctx | impl | ops/s | client CPU µs/op | server CPU µs/op (all nodes) | total µs/op | scripts/op | script time µs/op | other commands/op | their time µs/op |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, c := range cs {
		stats := "– | – | – | –"
		if c.Commands {
			stats = fmt.Sprintf("%.1f | %.1f | %.1f | %.1f", c.Scripts, micro(c.ScriptTime), c.Others, micro(c.OthersTime))
		}
		fmt.Fprintf(w, "| %s | %s | %.0f | %.1f | %.1f | %.1f | %s |\n", c.Ctx, c.Impl, c.OpsPerSec,
			micro(c.ClientPerOp), micro(c.ServerPerOp), micro(c.ClientPerOp+c.ServerPerOp), stats)
	}
}

func micro(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
