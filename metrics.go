package dlock

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
)

// Acquisition results, the values of the "result" attribute.
const (
	resultAcquired    = "acquired"
	resultNotAcquired = "not_acquired"
	resultCanceled    = "canceled"
	resultError       = "error"
)

// Histogram bucket boundaries, in seconds: OpenTelemetry's defaults (0, 5,
// 10, 25 ... 10000) would put every acquisition in the first bucket. A
// TryAcquire takes from tens of microseconds (a local file) to
// milliseconds (a quorum); a wait, up to minutes; a hold, up to hours.
var (
	waitBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
		0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300}
	holdBuckets = []float64{0.001, 0.01, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600, 4 * 3600, 24 * 3600}
)

// metrics holds the instruments of one Locker. Lock names are never
// attribute values: they are unbounded; a name class (WithNameClass) is.
// Attribute sets are built once per class so the hot path allocates
// nothing for them.
type metrics struct {
	wait     metric.Float64Histogram
	hold     metric.Float64Histogram
	acquires metric.Int64Counter
	renewals metric.Int64Counter
	lost     metric.Int64Counter
	held     metric.Int64UpDownCounter
	waiting  metric.Int64UpDownCounter
	folded   metric.Int64Counter

	backend attribute.KeyValue
	plain   *metricSets // without a class
	classOf func(name string) string
	mu      sync.RWMutex
	classes map[string]*metricSets // at most maxNameClasses
}

// maxNameClasses bounds the distinct classes a Locker's WithNameClass
// function may give; the names of any further class are counted in
// foldedClass.
const maxNameClasses = 100

// foldedClass is the class attribute of the names whose class came after
// maxNameClasses others.
const foldedClass = "_other"

// metricSets are the attribute sets of the measurements about locks of
// one name class (or, in plain, of every lock when there are no classes).
type metricSets struct {
	class    string    // "" without classes
	obs      *leaseObs // for a lease with these sets and no span
	backend  opts      // the backend (and class)
	byResult map[string]opts
	renewOK  opts
	renewErr opts
	released opts
	lostOpt  opts
	byReason map[string]opts // dlock.lost, by reason
}

// opts is one attribute set as the options of an Add and of a Record,
// built once: a variadic argument list built at each call escapes to the
// heap, an allocation per measurement.
type opts struct {
	add    []metric.AddOption
	record []metric.RecordOption
}

func optsOf(o metric.MeasurementOption) opts {
	return opts{add: []metric.AddOption{o}, record: []metric.RecordOption{o}}
}

// newMetricSets builds the sets of the backend attribute and class (none
// when "").
func newMetricSets(backend attribute.KeyValue, class string) *metricSets {
	base := []attribute.KeyValue{backend}
	if class != "" {
		base = append(base, attribute.String("class", class))
	}
	with := func(kv ...attribute.KeyValue) opts {
		return optsOf(metric.WithAttributeSet(attribute.NewSet(append(kv, base...)...)))
	}
	x := &metricSets{class: class, backend: with(), byResult: map[string]opts{}, byReason: map[string]opts{}}
	for _, r := range []string{resultAcquired, resultNotAcquired, resultCanceled, resultError} {
		x.byResult[r] = with(attribute.String("result", r))
	}
	x.obs = &leaseObs{ms: x}
	x.renewOK = with(attribute.String("result", "ok"))
	x.renewErr = with(attribute.String("result", "error"))
	x.released = with(attribute.String("end", "released"))
	x.lostOpt = with(attribute.String("end", "lost"))
	for _, r := range []string{lostExpired, lostGone, lostBackend, lostMaxHold} {
		x.byReason[r] = with(attribute.String("reason", r))
	}
	return x
}

// sets returns the attribute sets for the lock called name: its class's,
// made on first use, or plain without WithNameClass.
func (m *metrics) sets(name string) *metricSets {
	if m.classOf == nil {
		return m.plain
	}
	class := m.classOf(name)
	m.mu.RLock()
	x, ok := m.classes[class]
	m.mu.RUnlock()
	if ok {
		return x
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if x, ok := m.classes[class]; ok {
		return x
	}
	if len(m.classes) >= maxNameClasses {
		m.folded.Add(context.Background(), 1, m.plain.backend.add...)
		if x, ok := m.classes[foldedClass]; ok {
			return x
		}
		class = foldedClass
	}
	x = newMetricSets(m.backend, class)
	m.zero(x)
	m.classes[class] = x
	return x
}

// zero adds 0 to each counter series of x, once as x is made, so that
// the series exist before their first event: Prometheus's increase() and
// rate() count from a series' first sample, and would miss the first loss
// (or failure) of each reason if that event created the series.
func (m *metrics) zero(x *metricSets) {
	ctx := context.Background()
	for _, o := range x.byResult {
		m.acquires.Add(ctx, 0, o.add...)
	}
	for _, o := range x.byReason {
		m.lost.Add(ctx, 0, o.add...)
	}
	m.renewals.Add(ctx, 0, x.renewOK.add...)
	m.renewals.Add(ctx, 0, x.renewErr.add...)
	m.held.Add(ctx, 0, x.backend.add...)
	m.waiting.Add(ctx, 0, x.backend.add...)
}

// Why a lease was lost: the values of dlock.lost's reason attribute.
const (
	// lostExpired: no renewal succeeded before the lease's validity
	// ended (the store unreachable, or renewal off and no Renew).
	lostExpired = "expired"
	// lostGone: a renewal or the release found the lock no longer the
	// lease's (taken over after expiring, or deleted on the store).
	lostGone = "gone"
	// lostBackend: the backend signalled the loss itself (a ZooKeeper
	// session or etcd lease that expired, a database connection lost).
	lostBackend = "backend"
	// lostMaxHold: the lease was held for its WithMaxHold.
	lostMaxHold = "max_hold"
)

func newMetrics(mp metric.MeterProvider, backend string, classOf func(string) string) *metrics {
	if mp == nil {
		mp = noop.NewMeterProvider()
	}
	m := mp.Meter("github.com/dlockgo/dlock")
	x := metrics{classOf: classOf, classes: map[string]*metricSets{}}
	// Instrument creation only fails on invalid names, which are constants
	// here; a failed instrument is a no-op one, so the errors are ignored.
	x.wait, _ = m.Float64Histogram("dlock.acquire.duration", metric.WithUnit("s"),
		metric.WithDescription("Time spent in Acquire or TryAcquire, by result."),
		metric.WithExplicitBucketBoundaries(waitBuckets...))
	x.hold, _ = m.Float64Histogram("dlock.hold.duration", metric.WithUnit("s"),
		metric.WithDescription("Time a lease was held, by how it ended."),
		metric.WithExplicitBucketBoundaries(holdBuckets...))
	x.acquires, _ = m.Int64Counter("dlock.acquisitions", metric.WithUnit("{acquisition}"),
		metric.WithDescription("Acquisition attempts, by result."))
	x.renewals, _ = m.Int64Counter("dlock.renewals", metric.WithUnit("{renewal}"),
		metric.WithDescription("Lease renewals, by result."))
	x.lost, _ = m.Int64Counter("dlock.lost", metric.WithUnit("{lease}"),
		metric.WithDescription("Leases lost while held, by reason."))
	x.held, _ = m.Int64UpDownCounter("dlock.held", metric.WithUnit("{lease}"),
		metric.WithDescription("Leases currently held by this process."))
	x.waiting, _ = m.Int64UpDownCounter("dlock.waiting", metric.WithUnit("{call}"),
		metric.WithDescription("Acquire calls of this process in progress: waiting for a lock, or making their first attempt."))
	x.folded, _ = m.Int64Counter("dlock.name_class.folded", metric.WithUnit("{name}"),
		metric.WithDescription("Lock names whose class came after the Locker's first 100 classes, measured as class _other."))
	x.backend = attribute.String("backend", backend)
	x.plain = newMetricSets(x.backend, "")
	if classOf == nil {
		x.zero(x.plain) // with classes, each class's sets are zeroed as made
	} else {
		x.folded.Add(context.Background(), 0, x.plain.backend.add...)
	}
	return &x
}

func (m *metrics) acquired(x *metricSets, result string, waited time.Duration) {
	ctx := context.Background()
	o := x.byResult[result]
	m.wait.Record(ctx, waited.Seconds(), o.record...)
	m.acquires.Add(ctx, 1, o.add...)
	if result == resultAcquired {
		m.held.Add(ctx, 1, x.backend.add...)
	}
}

// waits adds n (1 when an Acquire call starts, -1 when it returns) to
// dlock.waiting.
func (m *metrics) waits(x *metricSets, n int64) {
	m.waiting.Add(context.Background(), n, x.backend.add...)
}

func (m *metrics) renewed(x *metricSets, ok bool) {
	o := x.renewErr
	if ok {
		o = x.renewOK
	}
	m.renewals.Add(context.Background(), 1, o.add...)
}

// ended records a lease's end: lost is why it was lost, "" for a release.
func (m *metrics) ended(x *metricSets, lost string, held time.Duration) {
	ctx := context.Background()
	m.held.Add(ctx, -1, x.backend.add...)
	o := x.released
	if lost != "" {
		m.lost.Add(ctx, 1, x.byReason[lost].add...)
		o = x.lostOpt
	}
	m.hold.Record(ctx, held.Seconds(), o.record...)
}
