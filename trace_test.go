package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/locktest"
	"github.com/dlockgo/dlock/memlock"
)

// attr returns the value of the attribute key of a span or event, and
// whether it has it.
func attr(attrs []attribute.KeyValue, key string) (attribute.Value, bool) {
	for _, kv := range attrs {
		if string(kv.Key) == key {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

// TestTracing: with WithTracerProvider, an acquisition is a dlock.acquire
// span under the caller's span, with its result, attempts and token (or
// the reason it failed); a release is a dlock.release span; a lost lease
// adds dlock.lost, with its reason, to the span it was acquired under.
func TestTracing(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	store := memlock.NewStore()
	l := newMem(t, store, dlock.WithTracerProvider(tp), dlock.WithNameClass(orderClass), dlock.WithTTL(300*time.Millisecond))
	ctx, request := tp.Tracer("test").Start(context.Background(), "request")

	lease := locktest.Must(t)(l.Acquire(ctx, "orders/1"))
	if _, err := l.TryAcquire(ctx, "orders/1"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatal(err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lost := locktest.Must(t)(l.Acquire(ctx, "orders/2"))
	store.Revoke("orders/2")
	select {
	case <-lost.Done():
	case <-time.After(time.Minute):
		t.Fatal("the revoked lease did not end")
	}
	request.End()

	var acquires, releases []sdktrace.ReadOnlySpan
	var requestSpan sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		switch s.Name() {
		case "dlock.acquire":
			acquires = append(acquires, s)
		case "dlock.release":
			releases = append(releases, s)
		case "request":
			requestSpan = s
		}
	}
	if len(acquires) != 3 || len(releases) != 1 || requestSpan == nil {
		t.Fatalf("%d acquire spans (want 3), %d release spans (want 1), request span %v", len(acquires), len(releases), requestSpan != nil)
	}
	for _, s := range append(acquires, releases...) {
		if s.Parent().SpanID() != request.SpanContext().SpanID() {
			t.Errorf("%s is not a child of the caller's span", s.Name())
		}
	}
	want := []struct {
		result string
		token  bool
	}{{"acquired", true}, {"not_acquired", false}, {"acquired", true}}
	for i, w := range want {
		a := acquires[i].Attributes()
		if v, _ := attr(a, "dlock.result"); v.AsString() != w.result {
			t.Errorf("acquire span %d: result %q, want %q", i, v.AsString(), w.result)
		}
		if _, ok := attr(a, "dlock.token"); ok != w.token {
			t.Errorf("acquire span %d: has a token %v, want %v", i, ok, w.token)
		}
		if v, _ := attr(a, "dlock.name_class"); v.AsString() != "orders" {
			t.Errorf("acquire span %d: name class %q, want orders", i, v.AsString())
		}
		if v, _ := attr(a, "dlock.attempts"); v.AsInt64() < 1 {
			t.Errorf("acquire span %d: %d attempts", i, v.AsInt64())
		}
	}
	if v, _ := attr(releases[0].Attributes(), "dlock.result"); v.AsString() != "released" {
		t.Errorf("release span: result %q, want released", v.AsString())
	}
	var lostEvent bool
	for _, e := range requestSpan.Events() {
		if e.Name == "dlock.lost" {
			v, _ := attr(e.Attributes, "dlock.reason")
			lostEvent = v.AsString() != ""
		}
	}
	if !lostEvent {
		t.Errorf("no dlock.lost event with a reason on the caller's span; events %v", requestSpan.Events())
	}
}

// TestTracingOff: without WithTracerProvider no span is made, even when
// the caller's context carries a recording span.
func TestTracingOff(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	l := newMem(t, memlock.NewStore())
	ctx, request := tp.Tracer("test").Start(context.Background(), "request")
	if err := locktest.Must(t)(l.Acquire(ctx, "x")).Release(ctx); err != nil {
		t.Fatal(err)
	}
	request.End()
	if n := len(rec.Ended()); n != 1 {
		t.Errorf("%d spans ended, want only the caller's", n)
	}
}

// BenchmarkAcquireReleaseTraced is BenchmarkAcquireRelease with the
// OpenTelemetry SDK sampling and recording every span (exporting none),
// under a caller's span.
func BenchmarkAcquireReleaseTraced(b *testing.B) {
	tp := sdktrace.NewTracerProvider()
	l := newMem(b, memlock.NewStore(), dlock.WithTracerProvider(tp))
	ctx, span := tp.Tracer("bench").Start(context.Background(), "request")
	defer span.End()
	locktest.BenchCycle(b, ctx, locktest.Kind(l, "mutex", "bench"))
}

// Tracing shows a lock wait inside the request's trace: dlock.acquire and
// dlock.release spans under the caller's span.
func ExampleWithTracerProvider() {
	rec := tracetest.NewSpanRecorder() // in a service: an exporter's batch processor
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	locker, err := dlock.Open(context.Background(), "mem://example-trace", dlock.WithTracerProvider(tp))
	if err != nil {
		panic(err)
	}
	defer locker.Close()

	ctx, request := tp.Tracer("service").Start(context.Background(), "POST /orders")
	lease, err := locker.Acquire(ctx, "orders/42")
	if err != nil {
		panic(err)
	}
	_ = lease.Release(ctx)
	request.End()
	for _, s := range rec.Ended() {
		fmt.Println(s.Name())
	}
	// Output:
	// dlock.acquire
	// dlock.release
	// POST /orders
}
