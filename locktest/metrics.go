package locktest

import (
	"context"
	"errors"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/dlockgo/dlock"
)

// WaitingGauge checks the dlock.waiting gauge on the backend open makes
// Lockers of (every Locker it opens takes the same lock called
// "waiting"): it counts the Acquire calls in progress, not TryAcquire's,
// and comes back to zero however a wait ends: with the lock, with its
// context cancelled, with its deadline passed, and with its Locker
// closed.
func WaitingGauge(t *testing.T, open func(t *testing.T, opts ...dlock.Option) *dlock.Locker) {
	const name, limit = "waiting", 20 * time.Second
	ctx := Context(t, time.Minute)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	gauge := func() int64 {
		t.Helper()
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(context.Background(), &rm); err != nil {
			t.Fatal(err)
		}
		var n int64
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				if sum, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == "dlock.waiting" {
					for _, p := range sum.DataPoints {
						n += p.Value
					}
				}
			}
		}
		return n
	}
	// waitsUntil starts acquire and returns its outcome's channel once
	// the gauge counts it.
	waitsUntil := func(what string, acquire func() (*dlock.Lease, error)) <-chan error {
		t.Helper()
		done := make(chan error, 1)
		go func() {
			lease, err := acquire()
			if err == nil {
				err = lease.Release(ctx)
			}
			done <- err
		}()
		if !Eventually(limit, func() bool { return gauge() == 1 }) {
			t.Fatalf("%s: dlock.waiting is %d while one Acquire waits, want 1", what, gauge())
		}
		return done
	}
	backToZero := func(what string) {
		t.Helper()
		if n := gauge(); n != 0 {
			t.Errorf("%s: dlock.waiting is %d once the Acquire returned, want 0", what, n)
		}
	}

	l := open(t, dlock.WithMeterProvider(mp))
	holder := open(t)
	held := Must(t)(holder.Acquire(ctx, name))
	if _, err := l.TryAcquire(ctx, name); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryAcquire of a held lock: %v, want ErrNotAcquired", err)
	}
	backToZero("TryAcquire")

	cctx, cancel := context.WithCancel(ctx)
	done := waitsUntil("cancelled", func() (*dlock.Lease, error) { return l.Acquire(cctx, name) })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled wait: %v, want context.Canceled", err)
	}
	backToZero("cancelled")

	dctx, dcancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer dcancel()
	if _, err := l.Acquire(dctx, name); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait past its deadline: %v, want context.DeadlineExceeded", err)
	}
	backToZero("deadline")

	done = waitsUntil("granted", func() (*dlock.Lease, error) { return l.Acquire(ctx, name) })
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("granted wait: %v", err)
	}
	backToZero("granted")

	held = Must(t)(holder.Acquire(ctx, name))
	closing := open(t, dlock.WithMeterProvider(mp))
	done = waitsUntil("closed", func() (*dlock.Lease, error) { return closing.Acquire(ctx, name) })
	if err := closing.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err == nil {
		t.Fatal("a wait whose Locker closed got the lock")
	}
	backToZero("closed")
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
