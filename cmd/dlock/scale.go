package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/internal/scale"
)

// scaleFlags are bench's flags for --scale.
type scaleFlags struct {
	on                     *bool
	out                    *string
	waiters, held, clients *string
	step, fill             *time.Duration
	fleet                  *int
}

func addScaleFlags(f *flags) scaleFlags {
	d := scale.DefaultConfig("")
	return scaleFlags{
		on:      f.Bool("scale", false, "sweep how the cost grows with waiters on one name, names held at once and clients (see docs/SCALING.md) instead of the three phases"),
		out:     f.String("out", "dlock-scale", "with --scale: `directory` for scale.csv and one SVG chart per sweep"),
		waiters: f.String("waiters", scale.FormatInts(d.Waiters), "with --scale: waiters on one name, a comma-separated `list`"),
		held:    f.String("held", scale.FormatInts(d.Held), "with --scale: names held at once, a comma-separated `list` (ascending)"),
		clients: f.String("clients", scale.FormatInts(d.Clients), "with --scale: clients each on a name of its own, a comma-separated `list`"),
		step:    f.Duration("step", d.Step, "with --scale: how long each point of the waiters and clients sweeps runs"),
		fill:    f.Duration("fill", d.Fill, "with --scale: the most time to reach each level of the held sweep"),
		fleet:   f.Int("fleet", d.Fleet, "with --scale: Lockers (connections) a sweep spreads its goroutines over"),
	}
}

func parseInts(flag, s string, most int) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 || n > most {
			return nil, fmt.Errorf("--%s %q: want whole numbers from 1 to %d", flag, s, most)
		}
		out = append(out, n)
	}
	return out, nil
}

// config checks the flags and returns the sweeps they ask for.
func (sf scaleFlags) config() (scale.Config, error) {
	c := scale.DefaultConfig("dlock-bench/" + newID() + "/")
	var err error
	if c.Waiters, err = parseInts("waiters", *sf.waiters, 100000); err != nil {
		return c, err
	}
	if c.Held, err = parseInts("held", *sf.held, 10000000); err != nil {
		return c, err
	}
	for i := 1; i < len(c.Held); i++ {
		if c.Held[i] <= c.Held[i-1] {
			return c, fmt.Errorf("--held %q: want ascending levels", *sf.held)
		}
	}
	if c.Clients, err = parseInts("clients", *sf.clients, 100000); err != nil {
		return c, err
	}
	switch {
	case *sf.step < 100*time.Millisecond:
		return c, fmt.Errorf("--step %v: want at least 100ms", *sf.step)
	case *sf.fill < time.Second:
		return c, fmt.Errorf("--fill %v: want at least 1s", *sf.fill)
	case *sf.fleet < 1 || *sf.fleet > 1024:
		return c, fmt.Errorf("--fleet %d: want 1 to 1024", *sf.fleet)
	}
	c.Step, c.Fill, c.Fleet = *sf.step, *sf.fill, *sf.fleet
	return c, nil
}

// runScale runs the sweeps on every backend and writes their CSV and
// charts to the out directory, and a summary to sio.out.
func runScale(ctx context.Context, sio *stdio, cmd string, sf scaleFlags, backends []string, opts ...dlock.Option) int {
	c, err := sf.config()
	if err != nil {
		return usageErr(sio, cmd, "%v", err)
	}
	// Open each backend once first: a bad URL fails before minutes of work.
	for _, b := range backends {
		l, code := openLocker(ctx, sio, cmd, b, opts...)
		if l == nil {
			return code
		}
		_ = l.Close()
	}
	c.Progress = func(msg string) { fmt.Fprintf(sio.err, "bench: %s\n", msg) }
	var all []scale.Point
	seen := map[string]int{}
	for _, b := range backends {
		t := scale.Target{
			Name:    label(b, seen),
			Servers: serverAddrs(b),
			Entries: storeEntries(b),
			Open: func(ctx context.Context) (scale.Locker, error) {
				l, err := dlock.Open(ctx, b, opts...)
				if err != nil {
					return nil, err
				}
				return scaleLocker{l}, nil
			},
		}
		start := time.Now()
		ps, err := scale.Run(ctx, t, c)
		all = append(all, ps...)
		if err != nil {
			return failf(sio, exitUnavailable, cmd, "%s: %s", redact(b), oneLine(err))
		}
		fmt.Fprintf(sio.err, "bench: %s (%s): sweeps done in %v\n", t.Name, redact(b), time.Since(start).Round(time.Second))
	}
	if err := scale.WriteDir(*sf.out, all); err != nil {
		return failf(sio, exitFailure, cmd, "%v", err)
	}
	printScale(sio.out, all)
	fmt.Fprintf(sio.out, "\nCSV and charts in %s\n", *sf.out)
	return exitOK
}

// label names a backend in the charts by its scheme, numbered when
// several share one.
func label(raw string, seen map[string]int) string {
	s, _, _ := strings.Cut(raw, "://")
	seen[s]++
	if n := seen[s]; n > 1 {
		return s + "#" + strconv.Itoa(n)
	}
	return s
}

// printScale prints a line per point with its main figures.
func printScale(w io.Writer, ps []scale.Point) {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "backend\tsweep\tx\treached\tmain figures\tnote")
	for _, p := range ps {
		var figs string
		v := p.Values
		switch p.Sweep {
		case scale.SweepWaiters:
			figs = fmt.Sprintf("%.0f acq/s, wait p99 %.1f ms, max %.0f ms, %.0f%% to another", v[scale.MAcqRate], v[scale.MWaitP99], v[scale.MWaitMax], v[scale.MHandoff])
		case scale.SweepHeld:
			figs = fmt.Sprintf("acq+rel p50 %s µs p99 %s µs, server %s B/lock, client %s B/lock",
				fig(v, scale.MCycleP50), fig(v, scale.MCycleP99), fig(v, scale.MServerMemPerHeld), fig(v, scale.MHeapPerHeld))
		default:
			figs = fmt.Sprintf("%.0f ops/s, client %.0f µs/op, server %.0f µs/op", v[scale.MOpsRate], v[scale.MClientCPUPerOp], v[scale.MServerCPUPerOp])
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\n", p.Target, p.Sweep, p.X, p.Reached, figs, p.Note)
	}
	_ = tw.Flush()
}

// fig formats metric m of v, rounded, or "—" when it was not measured
// (too few locks held for a per-lock figure, a probe that failed).
func fig(v map[string]float64, m string) string {
	if x, ok := v[m]; ok {
		return strconv.FormatFloat(x, 'f', 0, 64)
	}
	return "—"
}

// scaleLocker runs the sweeps on a dlock Locker.
type scaleLocker struct{ l *dlock.Locker }

func (s scaleLocker) Acquire(ctx context.Context, name string) (scale.Held, error) {
	lease, err := s.l.Acquire(ctx, name)
	if err != nil {
		return nil, err
	}
	return lease, nil
}

func (s scaleLocker) Close() error { return s.l.Close() }

// defaultPorts are the schemes' default server ports, for a URL that
// names a host without one.
var defaultPorts = map[string]string{
	"redis": "6379", "rediss": "6379", "redlock": "6379", "redis+sentinel": "26379",
	"zk": "2181", "etcd": "2379", "etcds": "2379", "postgres": "5432", "postgresql": "5432",
	"mysql": "3306", "nats": "4222", "tls": "4222",
}

// serverAddrs returns the host:port addresses a backend URL names, whose
// processes scale reads when they run on this machine.
func serverAddrs(raw string) []string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return nil
	}
	var out []string
	for h := range strings.SplitSeq(u.Host, ",") {
		if _, _, err := net.SplitHostPort(h); err != nil {
			port, ok := defaultPorts[u.Scheme]
			if !ok {
				continue
			}
			h = net.JoinHostPort(h, port)
		}
		out = append(out, h)
	}
	return out
}
