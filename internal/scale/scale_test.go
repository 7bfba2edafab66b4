package scale

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// memStore is an in-process lock table with a cap on the locks held at
// once, standing in for a server's limit.
type memStore struct {
	mu      sync.Mutex
	cond    *sync.Cond
	held    map[string]bool
	most    int
	entries int // names ever locked, as a store that keeps a row per name
	seen    map[string]bool
}

var errFull = errors.New("memstore: too many locks")

func newMemStore(most int) *memStore {
	s := &memStore{held: map[string]bool{}, seen: map[string]bool{}, most: most}
	s.cond = sync.NewCond(&s.mu)
	return s
}

type memLocker struct{ s *memStore }

type memHeld struct {
	s    *memStore
	name string
}

func (l memLocker) Acquire(ctx context.Context, name string) (Held, error) {
	s := l.s
	stop := context.AfterFunc(ctx, func() { s.mu.Lock(); s.cond.Broadcast(); s.mu.Unlock() })
	defer stop()
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.held[name] {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		s.cond.Wait()
	}
	if len(s.held) >= s.most {
		return nil, errFull
	}
	s.held[name] = true
	if !s.seen[name] {
		s.seen[name] = true
		s.entries++
	}
	return memHeld{s, name}, nil
}

func (memLocker) Close() error { return nil }

func (h memHeld) Release(context.Context) error {
	h.s.mu.Lock()
	delete(h.s.held, h.name)
	h.s.cond.Broadcast()
	h.s.mu.Unlock()
	return nil
}

func smallConfig() Config {
	return Config{
		Waiters: []int{1, 8}, Held: []int{10, 100, 1000}, Clients: []int{1, 3},
		Step: 100 * time.Millisecond, Fill: 5 * time.Second, Fleet: 2, Fillers: 4, Prefix: "t/",
	}
}

// TestRunKeepsPointsALimitStops: a store that holds at most 150 locks
// reaches the 100 level, stops at 150 of 1000 with the store's error, and
// the sweeps after it still run; what the store keeps is counted.
func TestRunKeepsPointsALimitStops(t *testing.T) {
	s := newMemStore(150)
	ps, err := Run(context.Background(), Target{
		Name: "mem",
		Open: func(context.Context) (Locker, error) { return memLocker{s}, nil },
		Entries: func(context.Context) (int, error) {
			s.mu.Lock()
			defer s.mu.Unlock()
			return s.entries, nil
		},
	}, smallConfig())
	if err != nil {
		t.Fatal(err)
	}
	by := map[string]Point{}
	for _, p := range ps {
		by[p.Sweep+"/"+strconv.Itoa(p.X)] = p
	}
	if len(ps) != 7 {
		t.Fatalf("%d points, want 7: %+v", len(ps), ps)
	}
	if p := by["waiters/8"]; p.Values[MAcqRate] <= 0 || p.Values[MHandoff] <= 0 || p.Note != "" {
		t.Errorf("8 waiters: %+v", p)
	}
	if p := by["held/100"]; p.Reached != 100 || p.Note != "" || p.Values[MStoreEntries] < 100 {
		t.Errorf("held 100: %+v", p)
	}
	p := by["held/1000"]
	if p.Reached != 150 || !strings.Contains(p.Note, "reached 150 of 1000") || !strings.Contains(p.Note, errFull.Error()) {
		t.Errorf("held 1000: reached %d, note %q; want 150 and the store's error", p.Reached, p.Note)
	}
	if v, ok := p.Values[MCycleP50]; ok || !strings.Contains(p.Note, "probe: ") {
		t.Errorf("held 1000, where the store is full: probe p50 %v (recorded %v), note %q; want no latency and the probe's error", v, ok, p.Note)
	}
	if p.Values[MLeftoverEntries] < 150 {
		t.Errorf("leftovers %v, want the rows of every name locked", p.Values[MLeftoverEntries])
	}
	if p := by["clients/3"]; p.Values[MOpsRate] <= 0 || p.Values[MClientCPUPerOp] < 0 {
		t.Errorf("3 clients: %+v", p)
	}
}

// TestRunLevelsAfterALimitAreNotRun: once a level falls short, the higher
// ones are reported, not run.
func TestRunLevelsAfterALimitAreNotRun(t *testing.T) {
	s := newMemStore(50)
	c := smallConfig()
	c.Waiters, c.Clients = nil, nil
	ps, err := Run(context.Background(), Target{Name: "mem", Open: func(context.Context) (Locker, error) { return memLocker{s}, nil }}, c)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 3 || !strings.HasPrefix(ps[2].Note, "not run: reached 50 of 100") {
		t.Fatalf("points %+v; want the 1000 level not run after 100 fell short", ps)
	}
}

func TestRunNeedsAClient(t *testing.T) {
	_, err := Run(context.Background(), Target{Name: "down", Open: func(context.Context) (Locker, error) {
		return nil, errors.New("connection refused")
	}}, smallConfig())
	if err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("Run with no client: %v, want the open error", err)
	}
}

func TestWriteCSVKeepsNotes(t *testing.T) {
	var b bytes.Buffer
	err := WriteCSV(&b, []Point{
		{Target: "a", Sweep: SweepHeld, X: 10, Reached: 5, Note: "limit, with a comma", Values: map[string]float64{}},
		{Target: "a", Sweep: SweepClients, X: 1, Reached: 1, Values: map[string]float64{MOpsRate: 1234.5}},
	})
	if err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(&b).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	want := [][]string{
		{"target", "sweep", "x", "reached", "metric", "value", "note"},
		{"a", "held", "10", "5", "", "", "limit, with a comma"},
		{"a", "clients", "1", "1", "ops_per_s", "1234.5", ""},
	}
	if len(rows) != len(want) {
		t.Fatalf("rows %q, want %q", rows, want)
	}
	for i := range want {
		if strings.Join(rows[i], "|") != strings.Join(want[i], "|") {
			t.Errorf("row %d: %q, want %q", i, rows[i], want[i])
		}
	}
}

func TestWriteSVG(t *testing.T) {
	ps := []Point{
		{Target: "a<b", Sweep: SweepWaiters, X: 1, Reached: 1, Values: map[string]float64{MAcqRate: 10, MWaitP99: 1}},
		{Target: "a<b", Sweep: SweepWaiters, X: 1000, Reached: 1000, Values: map[string]float64{MAcqRate: 100000, MWaitP99: 2}},
		{Target: "c", Sweep: SweepWaiters, X: 10, Reached: 10, Values: map[string]float64{MAcqRate: 50}},
	}
	var b bytes.Buffer
	if err := WriteSVG(&b, SweepWaiters, ps); err != nil {
		t.Fatal(err)
	}
	svg := b.String()
	for _, want := range []string{"<svg", "a&lt;b", ">c<", "acquisitions per second", "not measured", "<polyline", ">100k<"} {
		if !strings.Contains(svg, want) {
			t.Errorf("SVG lacks %q", want)
		}
	}
}

func TestAxis(t *testing.T) {
	lin := newAxis([]float64{3, 7}, false)
	if lin.log || lin.lo != 0 || lin.pos(lin.hi) != 1 {
		t.Errorf("linear axis %+v", lin)
	}
	lg := newAxis([]float64{2, 3000}, false)
	if !lg.log || lg.lo != 1 || lg.hi != 10000 || len(lg.ticks()) != 5 {
		t.Errorf("log axis %+v", lg)
	}
	if p := lg.pos(100); p < 0.49 || p > 0.51 {
		t.Errorf("log axis puts 100 at %v, want 0.5", p)
	}
	for v, want := range map[float64]string{12: "12", 12345: "12.35k", 2.5e6: "2.5M", 0.25: "0.25"} {
		if got := label(v); got != want {
			t.Errorf("label(%v) = %q, want %q", v, got, want)
		}
	}
}

func TestPercentile(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i))
	}
	if p := Percentile(ds, 50); p != 50 {
		t.Errorf("p50 = %v", p)
	}
	if p := Percentile(ds, 99); p != 99 {
		t.Errorf("p99 = %v", p)
	}
	if p := Percentile(nil, 99); p != 0 {
		t.Errorf("p99 of nothing = %v", p)
	}
}

// stingyLocker grants its first grants acquisitions (the warm-up's), then
// nothing: every later Acquire waits for its context, as a waiter whose
// wait outlasts the measured window does.
type stingyLocker struct{ grants *atomic.Int32 }

type nopHeld struct{}

func (nopHeld) Release(context.Context) error { return nil }

func (l stingyLocker) Acquire(ctx context.Context, _ string) (Held, error) {
	if l.grants.Add(-1) >= 0 {
		return nopHeld{}, nil
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

func (stingyLocker) Close() error { return nil }

// TestNoFiguresForWhatWasNotMeasured: a level where no waiter got the lock
// has no wait percentiles (there were no waits to rank), and no point has
// a heap figure at or below zero (a heap that did not grow measured
// nothing).
func TestNoFiguresForWhatWasNotMeasured(t *testing.T) {
	c := smallConfig()
	c.Waiters, c.Held, c.Clients = []int{4}, nil, nil
	grants := new(atomic.Int32)
	grants.Store(int32(c.Fleet)) // one warm-up cycle per client
	ps, err := Run(context.Background(), Target{Name: "stingy", Open: func(context.Context) (Locker, error) { return stingyLocker{grants}, nil }}, c)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 1 {
		t.Fatalf("%d points, want 1: %+v", len(ps), ps)
	}
	p := ps[0]
	if p.Values[MAcqRate] != 0 {
		t.Fatalf("acquisitions %v, want none", p.Values[MAcqRate])
	}
	for _, m := range []string{MWaitP50, MWaitP99} {
		if v, ok := p.Values[m]; ok {
			t.Errorf("%s = %v with no acquisition, want no figure", m, v)
		}
	}
	if v, ok := p.Values[MHeapPerWaiter]; ok && v <= 0 {
		t.Errorf("%s = %v, want a figure only for a heap that grew", MHeapPerWaiter, v)
	}
}
