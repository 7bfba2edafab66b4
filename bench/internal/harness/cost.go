package harness

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Cost is the CPU an implementation spends per operation in S2, on the
// client (this whole process) and on the Redis servers it uses. On a
// small machine where client and servers share the CPUs, their sum bounds
// the throughput.
type Cost struct {
	Impl, Ctx   string
	OpsPerSec   float64
	ClientPerOp time.Duration
	ServerPerOp time.Duration // summed over the nodes the implementation uses
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
// fresh instance of s whose single-node server is private (addr) rather
// than the shared one, so that the servers' CPU is the implementation's
// alone.
func MeasureCost(ctx context.Context, s Spec, e *Env, addr, kind string, d time.Duration) (Cost, error) {
	ce := &Env{Shared: addr, Nodes: e.Nodes, Run: e.Run}
	addrs := []string{addr}
	if s.Private {
		addrs = e.Nodes
	}
	for _, a := range append([]string{addr}, e.Nodes...) {
		c := NewClient(a)
		err := c.FlushAll(ctx).Err()
		_ = c.Close()
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
	for _, a := range addrs {
		c := NewClient(a)
		err := c.ConfigResetStat(ctx).Err()
		_ = c.Close()
		if err != nil {
			return Cost{}, err
		}
	}
	s0, err := ServerCPU(ctx, addrs)
	if err != nil {
		return Cost{}, err
	}
	r := Run(S2, im, ce.Key(s.Name, "cost", kind), kind, Budget{D: d}, Hooks{})
	s1, err := ServerCPU(ctx, addrs)
	if err != nil {
		return Cost{}, err
	}
	if r.Ops == 0 {
		return Cost{}, fmt.Errorf("no operations")
	}
	// INFO itself and CONFIG are not the implementation's.
	st, err := commandStats(ctx, addrs)
	if err != nil {
		return Cost{}, err
	}
	perOp := func(usec float64) time.Duration {
		return time.Duration(usec * float64(time.Microsecond) / float64(r.Ops))
	}
	return Cost{
		Scripts:     st.scripts / float64(r.Ops),
		Others:      st.others / float64(r.Ops),
		ScriptTime:  perOp(st.scriptUsec),
		OthersTime:  perOp(st.otherUsec),
		Impl:        s.Name,
		Ctx:         kind,
		OpsPerSec:   r.OpsPerSec(),
		ClientPerOp: r.ClientCPU / time.Duration(r.Ops),
		ServerPerOp: (s1 - s0) / time.Duration(r.Ops),
		Nodes:       len(addrs),
	}, nil
}

type cmdStats struct{ scripts, others, scriptUsec, otherUsec float64 }

// commandStats sums INFO commandstats over the servers at addrs, scripts
// (EVAL, EVALSHA) apart, without INFO and CONFIG (the harness's own).
func commandStats(ctx context.Context, addrs []string) (cmdStats, error) {
	var st cmdStats
	for _, a := range addrs {
		c := NewClient(a)
		info, err := c.Info(ctx, "commandstats").Result()
		_ = c.Close()
		if err != nil {
			return st, err
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
	}
	return st, nil
}

// WriteCosts writes the CPU-cost table.
func WriteCosts(w io.Writer, cs []Cost, d time.Duration) {
	fmt.Fprintf(w, "**CPU per operation** — S2 again for %v, every server private (so Redis's CPU is this implementation's alone); the Redis command counts and times are from INFO commandstats, where a script's time includes the commands it calls, and those are also counted among the other commands\n\n", d)
	fmt.Fprintf(w, "| ctx | impl | ops/s | client CPU µs/op | Redis CPU µs/op (all nodes) | total µs/op | scripts/op | script time µs/op | other commands/op | their time µs/op |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, c := range cs {
		fmt.Fprintf(w, "| %s | %s | %.0f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f |\n", c.Ctx, c.Impl, c.OpsPerSec,
			micro(c.ClientPerOp), micro(c.ServerPerOp), micro(c.ClientPerOp+c.ServerPerOp),
			c.Scripts, micro(c.ScriptTime), c.Others, micro(c.OthersTime))
	}
}

func micro(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
