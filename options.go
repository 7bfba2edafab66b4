package dlock

import (
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// DefaultTTL is the time to live of a lock when no WithTTL option is given.
// With automatic renewal on (the default) the TTL bounds how long a crashed
// holder blocks others, not how long work may take.
const DefaultTTL = 30 * time.Second

// MinTTL is the shortest TTL dlock accepts: below it, one round trip and a
// drift allowance would leave no validity at all.
const MinTTL = 10 * time.Millisecond

// An Option configures a Locker (given to New or Open) or one acquisition
// (given to Acquire or TryAcquire, overriding the Locker's value). Options
// that only make sense for a Locker say so and are ignored per call.
type Option func(*config)

type config struct {
	ttl       time.Duration
	maxHold   time.Duration
	autoRenew bool
	backoff   Backoff
	logger    *slog.Logger
	meter     metric.MeterProvider
	nameClass func(name string) string
	tracer    trace.TracerProvider
	err       error
}

func defaultConfig() config {
	return config{ttl: DefaultTTL, autoRenew: true, backoff: DefaultBackoff}
}

func (c config) with(opts []Option) config {
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	return c
}

// WithTTL sets the lock's time to live: how long the store keeps it without
// a renewal. The default is DefaultTTL; values below MinTTL are an error.
// With automatic renewal, the lease is renewed about every ttl/3.
func WithTTL(ttl time.Duration) Option {
	return func(c *config) {
		if ttl < MinTTL {
			c.err = fmt.Errorf("dlock: TTL %v is below the minimum %v", ttl, MinTTL)
			return
		}
		c.ttl = ttl
	}
}

// WithMaxHold caps how long a lease may be held, so that a stuck holder
// cannot keep a lock for ever by renewing it: d after its grant, renewal
// stops, the lease ends as lost with an error matching both ErrLost and
// ErrMaxHold (metrics reason "max_hold", and logged), and dlock releases
// the lock on the store, owner-checked, on a goroutine that Locker.Close
// waits for (bounded): a program that closes its Locker before it exits
// leaves the lock free. Zero, the default, means no cap; a negative d is
// an error.
func WithMaxHold(d time.Duration) Option {
	return func(c *config) {
		if d < 0 {
			c.err = fmt.Errorf("dlock: max hold %v is negative", d)
			return
		}
		c.maxHold = d
	}
}

// WithAutoRenew turns automatic renewal (the watchdog) on or off. On, the
// default, dlock renews the lock about every TTL/3 while the lease is
// held. Off, the caller renews with Lease.Renew. Either way the lease
// is reported lost when its validity ends without a successful renew.
func WithAutoRenew(on bool) Option {
	return func(c *config) { c.autoRenew = on }
}

// WithBackoff sets how long Acquire waits between attempts on a backend
// that cannot notify waiters of a release. The default is DefaultBackoff.
func WithBackoff(b Backoff) Option {
	return func(c *config) {
		if b != nil {
			c.backoff = b
		}
	}
}

// WithLogger sets the structured logger for acquisitions, renewal failures
// and lost leases. The default logs nothing. Locker option.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) { c.logger = l }
}

// WithNameClass adds to every metric about a lock the attribute class,
// class(name) for the lock's name: a short, bounded label such as
// "orders" for "orders/42", so that an operator can tell which kind of
// lock waits or is lost (lock names themselves are never attributes: they
// are unbounded). A Locker keeps the first 100 distinct classes its
// function returns; the names of any other class are measured as class
// "_other" and counted in dlock.name_class.folded. class is called once
// per acquisition, and must be safe for concurrent use. Locker option.
func WithNameClass(class func(name string) string) Option {
	return func(c *config) { c.nameClass = class }
}

// WithTracerProvider turns tracing on, with the OpenTelemetry tracer
// provider tp: a span dlock.acquire for each Acquire or TryAcquire call (a
// child of the span in its context, with the backend, mode, result,
// attempts, time waited, and the token or the error), a span
// dlock.release for each Release, and events dlock.renewal_failed and
// dlock.lost on the span of the context the lease was acquired with (see
// docs/OBSERVABILITY.md). No span is made per renewal. The default is no
// tracing, which costs nothing. Locker option.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) { c.tracer = tp }
}

// WithMeterProvider sets the OpenTelemetry meter provider that receives
// dlock's metrics (see docs/OBSERVABILITY.md for the instruments). The
// default is a no-op provider. Locker option.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) { c.meter = mp }
}
