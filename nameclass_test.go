package dlock_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/locktest"
	"github.com/dlockgo/dlock/memlock"
)

// orderClass is the name class of the tests: the name up to its first
// slash ("orders/42" -> "orders").
func orderClass(name string) string {
	class, _, _ := strings.Cut(name, "/")
	return class
}

// TestNameClass: WithNameClass puts each lock's class on every metric
// about it, keeps the first 100 classes, and measures the names of the
// others as class _other, counting them in dlock.name_class.folded.
func TestNameClass(t *testing.T) {
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	l := newMem(t, memlock.NewStore(), dlock.WithMeterProvider(mp), dlock.WithNameClass(orderClass))
	cycle := func(name string) {
		t.Helper()
		if err := mustAcquire(t, l, name).Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	cycle("orders/42")
	cycle("orders/43")
	for i := range 105 { // classes c0..c98 reach 100 with orders; c99..c104 fold
		cycle(fmt.Sprintf("c%d/x", i))
	}

	classes := map[string]int64{} // dlock.acquisitions by class
	var folded int64
	for _, m := range collect(t, reader) {
		switch data := m.Data.(type) {
		case metricdata.Sum[int64]:
			for _, p := range data.DataPoints {
				class, ok := p.Attributes.Value("class")
				switch {
				case m.Name == "dlock.name_class.folded":
					folded += p.Value
				case !ok:
					t.Errorf("%s: a data point without a class: %v", m.Name, p.Attributes)
				case m.Name == "dlock.acquisitions":
					classes[class.AsString()] += p.Value
				}
			}
		case metricdata.Histogram[float64]:
			for _, p := range data.DataPoints {
				if _, ok := p.Attributes.Value("class"); !ok {
					t.Errorf("%s: a data point without a class: %v", m.Name, p.Attributes)
				}
			}
		}
	}
	if classes["orders"] != 2 || classes["c0"] != 1 || classes["_other"] != 6 || len(classes) != 101 {
		t.Errorf("acquisitions by class: orders %d (want 2), c0 %d (want 1), _other %d (want 6), %d classes (want 101)",
			classes["orders"], classes["c0"], classes["_other"], len(classes))
	}
	if folded != 6 {
		t.Errorf("dlock.name_class.folded = %d, want 6", folded)
	}
}

// TestSeriesBeforeEvents: a Locker's counter series (acquisitions by
// result, losses by reason, renewals by result) and gauges exist at 0
// before their first event, without classes from the start and with them
// from a class's first lock, so that Prometheus's increase() counts the
// first loss of each reason (it counts from a series' first sample).
func TestSeriesBeforeEvents(t *testing.T) {
	for _, classes := range []bool{false, true} {
		reader := sdkmetric.NewManualReader()
		opts := []dlock.Option{dlock.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))}
		if classes {
			opts = append(opts, dlock.WithNameClass(orderClass))
		}
		l := newMem(t, memlock.NewStore(), opts...)
		if classes {
			if _, err := l.TryAcquire(context.Background(), "orders/1"); err != nil {
				t.Fatal(err)
			}
		}
		zeros := map[string]int{} // zero-valued series by instrument
		for _, m := range collect(t, reader) {
			if data, ok := m.Data.(metricdata.Sum[int64]); ok {
				for _, p := range data.DataPoints {
					if p.Value == 0 {
						zeros[m.Name]++
					}
				}
			}
		}
		want := map[string]int{"dlock.lost": 4, "dlock.renewals": 2, "dlock.acquisitions": 4, "dlock.waiting": 1, "dlock.held": 1}
		if classes {
			// orders/1 is held: one acquisition, and the gauge at 1.
			want["dlock.acquisitions"], want["dlock.held"], want["dlock.name_class.folded"] = 3, 0, 1
		}
		for name, n := range want {
			if zeros[name] != n {
				t.Errorf("classes %v: %s has %d series at 0, want %d (all: %v)", classes, name, zeros[name], n, zeros)
			}
		}
	}
}

// BenchmarkAcquireReleaseMetered is BenchmarkAcquireRelease with the
// OpenTelemetry SDK recording every metric, without and with a name
// class.
func BenchmarkAcquireReleaseMetered(b *testing.B) {
	for _, class := range []bool{false, true} {
		b.Run(map[bool]string{false: "class=off", true: "class=on"}[class], func(b *testing.B) {
			mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
			opts := []dlock.Option{dlock.WithMeterProvider(mp)}
			if class {
				opts = append(opts, dlock.WithNameClass(orderClass))
			}
			l := newMem(b, memlock.NewStore(), opts...)
			locktest.BenchCycle(b, context.Background(), locktest.Kind(l, "mutex", "orders/42"))
		})
	}
}
