package harness

import (
	"context"
	"fmt"
	"io"
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
	Nodes       int
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
	return Cost{
		Impl:        s.Name,
		Ctx:         kind,
		OpsPerSec:   r.OpsPerSec(),
		ClientPerOp: r.ClientCPU / time.Duration(r.Ops),
		ServerPerOp: (s1 - s0) / time.Duration(r.Ops),
		Nodes:       len(addrs),
	}, nil
}

// WriteCosts writes the CPU-cost table.
func WriteCosts(w io.Writer, cs []Cost, d time.Duration) {
	fmt.Fprintf(w, "**CPU per operation** — S2 again for %v, every server private (so Redis's CPU is this implementation's alone)\n\n", d)
	fmt.Fprintf(w, "| ctx | impl | ops/s | client CPU µs/op | Redis CPU µs/op (all nodes) | total µs/op |\n|---|---|---:|---:|---:|---:|\n")
	for _, c := range cs {
		fmt.Fprintf(w, "| %s | %s | %.0f | %.1f | %.1f | %.1f |\n", c.Ctx, c.Impl, c.OpsPerSec,
			micro(c.ClientPerOp), micro(c.ServerPerOp), micro(c.ClientPerOp+c.ServerPerOp))
	}
}

func micro(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
