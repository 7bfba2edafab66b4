// Package scale measures how a lock's cost grows with the work: waiters
// on one name, names held at once, and clients each on a name of its own.
// It drives any lock through the small Locker interface, so that dlock's
// CLI (dlock bench --scale) and the bench module (dlock's peers) run the
// same sweeps, and writes the points as CSV and the curves as SVG.
//
// Every sweep point is bounded in time. A point a target cannot reach (a
// server limit, an error) is kept, with what was reached and why, never
// dropped.
package scale

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// A Locker is one client of the fleet under test, with its own connections.
type Locker interface {
	// Acquire waits until the lock on name is held or ctx ends.
	Acquire(ctx context.Context, name string) (Held, error)
	Close() error
}

// Held is an acquired lock.
type Held interface {
	Release(ctx context.Context) error
}

// A Target is one lock implementation on one store.
type Target struct {
	// Name labels the target's lines and rows ("redis", "redsync-1").
	Name string
	// Open returns a new client of the fleet.
	Open func(ctx context.Context) (Locker, error)
	// Servers are the store's processes, found by their loopback
	// listening addresses (host:port), whose CPU and memory are read.
	// Empty when the store has no server of its own (a file, memory) or
	// none on this machine.
	Servers []string
	// Entries, when set, counts what the store holds (keys, znodes,
	// rows, stream messages), read before the held sweep, at each level
	// and after the release, to report the growth.
	Entries func(ctx context.Context) (int, error)
}

// Config sets the sweeps.
type Config struct {
	Waiters []int // waiters on one name
	Held    []int // names held at once
	Clients []int // clients, each on a name of its own
	// Step is how long each point of the waiters and clients sweeps runs.
	Step time.Duration
	// Fill bounds the time to reach each level of the held sweep (and to
	// release them all at the end).
	Fill time.Duration
	// Fleet is how many Lockers (processes of a fleet) a sweep spreads
	// its goroutines over, at most one per goroutine.
	Fleet int
	// Fillers is how many goroutines take the names of the held sweep.
	Fillers int
	// Prefix starts every lock name; unique to the run.
	Prefix string
	// Progress, if set, is told what runs.
	Progress func(msg string)
}

// DefaultConfig is the sweep of docs/SCALING.md.
func DefaultConfig(prefix string) Config {
	return Config{
		Waiters: []int{1, 10, 100, 1000},
		Held:    []int{1, 1000, 10000, 100000},
		Clients: []int{1, 4, 16, 64},
		Step:    3 * time.Second,
		Fill:    30 * time.Second,
		Fleet:   8,
		Fillers: 32,
		Prefix:  prefix,
	}
}

// FormatInts joins xs with commas, as the sweeps' list flags take them.
func FormatInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}

// Sweep names.
const (
	SweepWaiters = "waiters"
	SweepHeld    = "held"
	SweepClients = "clients"
)

// A Point is one measured point of one sweep for one target.
type Point struct {
	Target string
	Sweep  string
	X      int // the sweep's variable: waiters, names held, clients
	// Reached is how far the point got: X unless a limit stopped it.
	Reached int
	Values  map[string]float64
	// Note says why a point fell short, or what limits its figures.
	Note string
}

// Run runs every sweep of c on t, a point at a time, and returns the
// points in order. An error is returned only when ctx ends or no client
// could be opened at all; a point that failed carries its note.
func Run(ctx context.Context, t Target, c Config) ([]Point, error) {
	s := &run{t: t, c: c, procs: newProcs(t.Servers)}
	if c.Fleet < 1 || c.Fillers < 1 || c.Step <= 0 || c.Fill <= 0 {
		return nil, errors.New("scale: Fleet, Fillers, Step and Fill must be positive")
	}
	var out []Point
	for _, w := range c.Waiters {
		p, err := s.waiters(ctx, w)
		if err != nil {
			return out, err
		}
		out = append(out, p)
	}
	held, err := s.held(ctx)
	out = append(out, held...)
	if err != nil {
		return out, err
	}
	for _, n := range c.Clients {
		p, err := s.clients(ctx, n)
		if err != nil {
			return out, err
		}
		out = append(out, p)
	}
	return out, nil
}

type run struct {
	t     Target
	c     Config
	procs *procs
	seq   atomic.Int64
}

func (s *run) say(format string, args ...any) {
	if s.c.Progress != nil {
		s.c.Progress(fmt.Sprintf("%s: ", s.t.Name) + fmt.Sprintf(format, args...))
	}
}

// name returns a name unique to the run and this use.
func (s *run) name(what string) string {
	return s.c.Prefix + what + "-" + strconv.FormatInt(s.seq.Add(1), 10)
}

// fleet opens n clients. It fails only when it could open none; when it
// opened some, short says how many and what stopped it.
func (s *run) fleet(ctx context.Context, n int) (ls []Locker, short string, err error) {
	ls = make([]Locker, 0, n)
	for range n {
		l, err := s.t.Open(ctx)
		if err != nil {
			if len(ls) == 0 {
				return nil, "", fmt.Errorf("scale: %s: open a client: %w", s.t.Name, err)
			}
			return ls, fmt.Sprintf("opened %d of %d clients: %v", len(ls), n, err), nil
		}
		ls = append(ls, l)
	}
	return ls, "", nil
}

func closeAll(ls []Locker) {
	for _, l := range ls {
		_ = l.Close()
	}
}

// counter is the client's and the servers' CPU and the client's
// goroutines and heap at one moment.
type counter struct {
	at         time.Time
	client     time.Duration
	server     time.Duration
	serverOK   bool
	goroutines int
	heap       uint64
}

func (s *run) count(gc bool) counter {
	if gc {
		runtime.GC()
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	srv, ok := s.procs.cpu()
	return counter{at: time.Now(), client: SelfCPU(), server: srv, serverOK: ok, goroutines: runtime.NumGoroutine(), heap: ms.HeapAlloc}
}

// waiters runs w goroutines on one name, each waiting, holding for no
// time and releasing, over min(w, Fleet) clients: one Step for the
// waiters to queue up, then one Step measured.
func (s *run) waiters(ctx context.Context, w int) (Point, error) {
	p := Point{Target: s.t.Name, Sweep: SweepWaiters, X: w, Values: map[string]float64{}}
	s.say("%d waiters on one name (%v)", w, s.c.Step)
	ls, short, err := s.fleet(ctx, min(w, s.c.Fleet))
	if err != nil {
		return p, err
	}
	defer closeAll(ls)
	p.Note = short
	name := s.name("wait")
	// Warm each client up on the name (connections, scripts).
	for _, l := range ls {
		if err := cycle(ctx, l, name, s.c.Step); err != nil {
			p.Note = "warm-up: " + err.Error()
			return p, ctx.Err()
		}
	}
	base := s.count(true)
	// The waiters first queue up for one Step; the next Step is measured.
	// An acquisition counts when it returns inside the measured window,
	// with its whole wait.
	var from, end time.Time
	wctx, cancel := context.WithCancel(ctx)
	var (
		mu      sync.Mutex
		window  bool
		waits   []time.Duration
		maxWait time.Duration
		last    = -1
		n       int
		other   int
		errs    int
		firstE  error
		wg      sync.WaitGroup
	)
	failed := func(err error) { // under mu
		errs++
		firstE = cmp.Or(firstE, err)
	}
	for g := range w {
		wg.Go(func() {
			l := ls[g%len(ls)]
			for wctx.Err() == nil {
				t0 := time.Now()
				h, err := l.Acquire(wctx, name)
				d := time.Since(t0)
				mu.Lock()
				if err != nil {
					if wctx.Err() == nil && window {
						failed(err)
					}
					if window || wctx.Err() != nil {
						maxWait = max(maxWait, d) // a cancelled wait counts as far as it got
					}
					mu.Unlock()
					if wctx.Err() != nil {
						return
					}
					time.Sleep(10 * time.Millisecond)
					continue
				}
				if window {
					waits = append(waits, d)
					maxWait = max(maxWait, d)
					n++
					if last >= 0 && last != g {
						other++
					}
					last = g
				}
				mu.Unlock()
				if err := h.Release(ctx); err != nil && wctx.Err() == nil {
					mu.Lock()
					failed(err)
					mu.Unlock()
				}
			}
		})
	}
	time.Sleep(s.c.Step)
	before := s.count(false)
	mu.Lock()
	window, from, end = true, time.Now(), time.Now().Add(s.c.Step)
	mu.Unlock()
	time.Sleep(s.c.Step / 2)
	mid := s.count(true)
	time.Sleep(time.Until(end))
	mu.Lock()
	window = false
	at := s.count(false)
	mu.Unlock()
	cancel()
	wg.Wait()
	elapsed := at.at.Sub(from)
	p.Reached = w
	p.Values[MAcqRate] = float64(n) / elapsed.Seconds()
	if len(waits) > 0 { // no percentile of no waits
		p.Values[MWaitP50], p.Values[MWaitP99] = ms(Percentile(waits, 50)), ms(Percentile(waits, 99))
	}
	p.Values[MWaitMax] = ms(maxWait)
	if n > 1 {
		p.Values[MHandoff] = 100 * float64(other) / float64(n-1)
	}
	p.Values[MGoroutinesPerWaiter] = float64(mid.goroutines-base.goroutines) / float64(w)
	if h := int64(mid.heap) - int64(base.heap); h > 0 { // less is the GC's noise, not a cost
		p.Values[MHeapPerWaiter] = float64(h) / float64(w)
	}
	if before.serverOK && at.serverOK && n > 0 {
		p.Values[MServerCPUPerAcq] = us(at.server-before.server) / float64(n)
	}
	if errs > 0 {
		p.Note = joinNote(p.Note, fmt.Sprintf("%d failed calls, first: %v", errs, firstE))
	}
	return p, ctx.Err()
}

// cycle takes and releases name once, bounded by d.
func cycle(ctx context.Context, l Locker, name string, d time.Duration) error {
	cctx, cancel := context.WithTimeout(ctx, max(d, 5*time.Second))
	defer cancel()
	h, err := l.Acquire(cctx, name)
	if err != nil {
		return err
	}
	return h.Release(cctx)
}

// held fills the store level by level with held names, measures a probe
// name's acquire+release at each level and what holding costs, then
// releases them all and reads what remains.
func (s *run) held(ctx context.Context) ([]Point, error) {
	if len(s.c.Held) == 0 {
		return nil, nil
	}
	ls, _, err := s.fleet(ctx, s.c.Fleet)
	if err != nil {
		return nil, err
	}
	defer func() { closeAll(ls) }() // ls is closed and emptied before the leftovers are read
	prefix := s.c.Prefix + "held/"
	probe := s.name("probe")
	for _, l := range ls {
		if err := cycle(ctx, l, probe, s.c.Step); err != nil {
			return []Point{{Target: s.t.Name, Sweep: SweepHeld, X: s.c.Held[0], Values: map[string]float64{}, Note: "warm-up: " + err.Error()}}, ctx.Err()
		}
	}
	base := s.count(true)
	baseMem, memOK := s.procs.memory()
	baseEntries, entriesErr := s.entries(ctx)
	var (
		out   []Point
		hs    []Held
		stuck string
	)
	for _, level := range s.c.Held {
		p := Point{Target: s.t.Name, Sweep: SweepHeld, X: level, Values: map[string]float64{}}
		if stuck != "" {
			p.Reached = len(hs)
			p.Note = "not run: " + stuck
			out = append(out, p)
			continue
		}
		s.say("filling to %d names held (at most %v)", level, s.c.Fill)
		var note string
		hs, note = s.fill(ctx, ls, prefix, hs, level)
		p.Reached = len(hs)
		if note != "" {
			stuck = fmt.Sprintf("reached %d of %d held: %s", len(hs), level, note)
			p.Note = stuck
		}
		s.measureAt(ctx, ls[0], probe, &p, base, baseMem, memOK, len(hs))
		if n, err := s.entries(ctx); err == nil && entriesErr == nil {
			p.Values[MStoreEntries] = float64(n - baseEntries)
		}
		out = append(out, p)
		if ctx.Err() != nil {
			return out, ctx.Err()
		}
	}
	// Release everything and read what stays on the server.
	top := &out[len(out)-1]
	s.say("releasing %d names", len(hs))
	if note := s.releaseAll(ctx, hs); note != "" {
		top.Note = joinNote(top.Note, note)
	}
	closeAll(ls)
	ls = nil
	time.Sleep(time.Second)
	if n, err := s.entries(ctx); err == nil && entriesErr == nil {
		top.Values[MLeftoverEntries] = float64(n - baseEntries)
	} else if err := errors.Join(entriesErr, err); err != nil && !errors.Is(err, errNoEntries) {
		top.Note = joinNote(top.Note, "store entries: "+err.Error())
	}
	if m, ok := s.procs.memory(); ok && memOK {
		top.Values[MServerMemAfter] = float64(m - baseMem)
	}
	return out, ctx.Err()
}

var errNoEntries = errors.New("scale: the target does not count its entries")

func (s *run) entries(ctx context.Context) (int, error) {
	if s.t.Entries == nil {
		return 0, errNoEntries
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return s.t.Entries(ctx)
}

// fill takes names prefix+i for i from len(hs) until level are held,
// with Fillers goroutines over ls, within Fill. It returns the held
// locks and, when it fell short, why.
func (s *run) fill(ctx context.Context, ls []Locker, prefix string, hs []Held, level int) ([]Held, string) {
	fctx, cancel := context.WithTimeout(ctx, s.c.Fill)
	defer cancel()
	next := atomic.Int64{}
	next.Store(int64(len(hs)))
	var (
		mu     sync.Mutex
		firstE error
		wg     sync.WaitGroup
	)
	for g := range s.c.Fillers {
		wg.Go(func() {
			l := ls[g%len(ls)]
			for {
				i := next.Add(1) - 1
				if i >= int64(level) || fctx.Err() != nil {
					return
				}
				h, err := l.Acquire(fctx, prefix+strconv.FormatInt(i, 10))
				mu.Lock()
				if err != nil {
					firstE = cmp.Or(firstE, err)
					mu.Unlock()
					cancel()
					return
				}
				hs = append(hs, h)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	switch {
	case len(hs) >= level:
		return hs, ""
	case firstE != nil && !errors.Is(firstE, context.DeadlineExceeded) && !errors.Is(firstE, context.Canceled):
		return hs, firstE.Error()
	case ctx.Err() != nil:
		return hs, ctx.Err().Error()
	}
	return hs, fmt.Sprintf("time bound %v", s.c.Fill)
}

// measureAt measures, with n names held: the probe's acquire+release,
// the client's heap and goroutines and the servers' memory per held
// name, and the servers' CPU while nothing but holding happens.
func (s *run) measureAt(ctx context.Context, l Locker, probe string, p *Point, base counter, baseMem int64, memOK bool, n int) {
	var lat []time.Duration
	end := time.Now().Add(min(s.c.Step, time.Second))
	for len(lat) < 20 || time.Now().Before(end) && len(lat) < 1000 {
		t0 := time.Now()
		if err := cycle(ctx, l, probe, s.c.Step); err != nil {
			p.Note = joinNote(p.Note, "probe: "+err.Error())
			break
		}
		lat = append(lat, time.Since(t0))
	}
	if len(lat) > 0 { // none when the probe failed at once: no latency, not 0
		p.Values[MCycleP50] = us(Percentile(lat, 50))
		p.Values[MCycleP99] = us(Percentile(lat, 99))
	}
	idle0 := s.count(true)
	mem, ok := s.procs.memory()
	time.Sleep(s.c.Step) // renewals come every TTL/3: a longer window sees more of them
	idle1 := s.count(false)
	if n >= 100 { // fewer: the per-lock figures are noise
		if h := int64(idle0.heap) - int64(base.heap); h > 0 { // as for waiters
			p.Values[MHeapPerHeld] = float64(h) / float64(n)
		}
		p.Values[MGoroutinesPerHeld] = float64(idle0.goroutines-base.goroutines) / float64(n)
		// Fewer locks move a server's memory less than its allocator does.
		if ok && memOK && n >= 10000 {
			p.Values[MServerMemPerHeld] = float64(mem-baseMem) / float64(n)
		}
	}
	if idle0.serverOK && idle1.serverOK {
		p.Values[MServerCPUHolding] = 100 * (idle1.server - idle0.server).Seconds() / idle1.at.Sub(idle0.at).Seconds()
	}
	p.Values[MClientCPUHolding] = 100 * (idle1.client - idle0.client).Seconds() / idle1.at.Sub(idle0.at).Seconds()
}

// releaseAll releases hs with Fillers goroutines within Fill.
func (s *run) releaseAll(ctx context.Context, hs []Held) string {
	rctx, cancel := context.WithTimeout(ctx, s.c.Fill)
	defer cancel()
	var (
		next   atomic.Int64
		failed atomic.Int64
		wg     sync.WaitGroup
	)
	for range s.c.Fillers {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(len(hs)) || rctx.Err() != nil {
					return
				}
				if err := hs[i].Release(rctx); err != nil {
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if f := failed.Load(); f > 0 || rctx.Err() != nil {
		return fmt.Sprintf("release: %d failed, %d not tried in %v", f, max(0, int64(len(hs))-next.Load()), s.c.Fill)
	}
	return ""
}

// clients runs n goroutines, each on a name of its own, acquiring and
// releasing for Step over min(n, Fleet) clients.
func (s *run) clients(ctx context.Context, n int) (Point, error) {
	p := Point{Target: s.t.Name, Sweep: SweepClients, X: n, Values: map[string]float64{}}
	s.say("%d clients on names of their own (%v)", n, s.c.Step)
	ls, _, err := s.fleet(ctx, min(n, s.c.Fleet))
	if err != nil {
		return p, err
	}
	defer closeAll(ls)
	names := make([]string, n)
	for g := range n {
		names[g] = s.name("client")
		if err := cycle(ctx, ls[g%len(ls)], names[g], s.c.Step); err != nil {
			p.Note = "warm-up: " + err.Error()
			return p, ctx.Err()
		}
	}
	before := s.count(true)
	end := time.Now().Add(s.c.Step)
	var (
		ops    atomic.Int64
		errs   atomic.Int64
		firstE atomic.Pointer[error]
		lat    = make([][]time.Duration, n)
		wg     sync.WaitGroup
	)
	for g := range n {
		wg.Go(func() {
			l := ls[g%len(ls)]
			for time.Now().Before(end) {
				t0 := time.Now()
				if err := cycle(ctx, l, names[g], s.c.Step); err != nil {
					errs.Add(1)
					firstE.CompareAndSwap(nil, &err)
					time.Sleep(10 * time.Millisecond)
					continue
				}
				lat[g] = append(lat[g], time.Since(t0))
				ops.Add(1)
			}
		})
	}
	wg.Wait()
	after := s.count(false)
	elapsed := after.at.Sub(before.at)
	all := slices.Concat(lat...)
	p.Reached = n
	p.Values[MOpsRate] = float64(ops.Load()) / elapsed.Seconds()
	p.Values[MCycleP50] = us(Percentile(all, 50))
	p.Values[MCycleP99] = us(Percentile(all, 99))
	if o := ops.Load(); o > 0 {
		p.Values[MClientCPUPerOp] = us(after.client-before.client) / float64(o)
		if before.serverOK && after.serverOK {
			p.Values[MServerCPUPerOp] = us(after.server-before.server) / float64(o)
		}
	}
	if e := errs.Load(); e > 0 {
		p.Note = fmt.Sprintf("%d failed cycles, first: %v", e, *firstE.Load())
	}
	return p, ctx.Err()
}

func joinNote(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// Percentile returns the p-th percentile of ds (sorted in place).
func Percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	i := (len(ds)*p + 99) / 100
	return ds[min(max(i-1, 0), len(ds)-1)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
