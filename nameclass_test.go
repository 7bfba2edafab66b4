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
