package dlock

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/dlockgo/dlock/driver"
)

// tracerName is the instrumentation scope of dlock's spans.
const tracerName = "github.com/dlockgo/dlock"

// startAcquire starts the dlock.acquire span of one Acquire or TryAcquire
// call, a child of ctx's span, when the Locker traces (WithTracerProvider);
// otherwise it returns ctx and a nil span, at no cost.
func (l *Locker) startAcquire(ctx context.Context, req driver.Request, wait bool, ms *metricSets) (context.Context, trace.Span) {
	if l.tracer == nil {
		return ctx, nil
	}
	attrs := []attribute.KeyValue{
		attribute.String("dlock.backend", l.backend),
		attribute.String("dlock.mode", req.Mode.String()),
		attribute.Bool("dlock.wait", wait),
	}
	if ms.class != "" {
		attrs = append(attrs, attribute.String("dlock.name_class", ms.class))
	}
	return l.tracer.Start(ctx, "dlock.acquire", trace.WithAttributes(attrs...))
}

// endAcquire ends span (nil: not tracing) with the call's outcome: its
// result (as the metrics name it), attempts, time waited, and the token
// or the error.
func endAcquire(span trace.Span, result string, attempts int, waited time.Duration, token uint64, err error) {
	if span == nil {
		return
	}
	span.SetAttributes(
		attribute.String("dlock.result", result),
		attribute.Int("dlock.attempts", attempts),
		attribute.Float64("dlock.wait_seconds", waited.Seconds()),
	)
	if err == nil {
		span.SetAttributes(attribute.Int64("dlock.token", int64(token)))
	} else if result == resultError {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// leaseObs is what a lease reports to: its metrics' attribute sets and,
// when the Locker traces, the span of the context it was acquired with,
// which hears of its renewal failures and its loss. Without a span it is
// ms.obs, shared, so that a lease costs one pointer and no allocation.
type leaseObs struct {
	ms     *metricSets
	caller trace.Span // nil: not tracing
}

// observer returns the leaseObs of a lease with sets ms acquired under
// ctx.
func (l *Locker) observer(ctx context.Context, ms *metricSets) *leaseObs {
	if l.tracer != nil {
		if span := trace.SpanFromContext(ctx); span.IsRecording() {
			return &leaseObs{ms: ms, caller: span}
		}
	}
	return ms.obs
}

// traceRenewalFailed adds a dlock.renewal_failed event to the span the
// lease reports to.
func (s *Lease) traceRenewalFailed(err error) { s.traceEvent("dlock.renewal_failed", err) }

// traceLost adds a dlock.lost event, with its reason, to the span the
// lease reports to.
func (s *Lease) traceLost(reason string, cause error) {
	s.traceEvent("dlock.lost", cause, attribute.String("dlock.reason", reason))
}

// traceEvent adds the event name, with the backend, err and attrs, to the
// span the lease reports to, if any.
func (s *Lease) traceEvent(name string, err error, attrs ...attribute.KeyValue) {
	if c := s.obs.caller; c != nil {
		attrs = append(attrs, attribute.String("dlock.backend", s.l.backend), attribute.String("error", err.Error()))
		c.AddEvent(name, trace.WithAttributes(attrs...))
	}
}

// startRelease starts the dlock.release span of a Release, when the
// Locker traces.
func (s *Lease) startRelease(ctx context.Context) (context.Context, trace.Span) {
	if s.l.tracer == nil {
		return ctx, nil
	}
	return s.l.tracer.Start(ctx, "dlock.release", trace.WithAttributes(
		attribute.String("dlock.backend", s.l.backend), attribute.Int64("dlock.token", int64(s.token))))
}

// endRelease ends a release's span with its outcome: released, not_held
// (the lease had ended or the lock was gone) or error.
func endRelease(span trace.Span, err error) {
	if span == nil {
		return
	}
	result := "released"
	switch {
	case errors.Is(err, ErrNotHeld):
		result = "not_held"
	case err != nil:
		result = resultError
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.SetAttributes(attribute.String("dlock.result", result))
	span.End()
}
