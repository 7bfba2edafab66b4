// Package doctor holds what the backends' driver.Diagnoser checks share:
// the round trip to the store and its clock against this host's.
package doctor

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/dlockgo/dlock/driver"
)

// Samples is how many times Clock asks the store for its time.
const Samples = 5

// MaxSkew is the clock difference above which Clock warns.
const MaxSkew = time.Second

// Clock asks the store for its time Samples times through now (one round
// trip each) and returns two findings: the round trip against ttl, and
// the store's clock against this host's, judged from the fastest sample
// (the store's reading lies within its round trip). doc is the backend's
// docs page. The error is the first sample's: a store that cannot be
// asked at all.
func Clock(ctx context.Context, ttl time.Duration, doc string, now func(context.Context) (time.Time, error)) ([]driver.Finding, error) {
	var skew time.Duration
	fastest := time.Duration(-1)
	best, worst, err := RoundTrips(ctx, func(ctx context.Context) error {
		start := time.Now()
		at, err := now(ctx)
		if rtt := time.Since(start); err == nil && (fastest < 0 || rtt < fastest) {
			// The store read its clock somewhere in the round trip: the
			// middle is the best guess, within ±rtt/2.
			fastest, skew = rtt, at.Sub(start.Add(rtt/2))
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return []driver.Finding{RoundTrip(best, worst, ttl), Skew(skew, fastest/2, doc)}, nil
}

// RoundTrips times Samples calls of f, each one round trip to the store,
// and returns the fastest and the slowest; the error is the first call's
// (later ones end the sampling).
func RoundTrips(ctx context.Context, f func(context.Context) error) (best, worst time.Duration, err error) {
	for i := range Samples {
		start := time.Now()
		err := f(ctx)
		rtt := time.Since(start)
		if err != nil {
			if i == 0 {
				return 0, 0, err
			}
			break
		}
		if i == 0 || rtt < best {
			best = rtt
		}
		worst = max(worst, rtt)
	}
	return best, worst, nil
}

// NoClock is the clock finding of a store that tells no time.
func NoClock(why, doc string) driver.Finding {
	return driver.Finding{Check: "clock", Found: "not read: " + why, Doc: doc}
}

// RoundTrip judges the round trip to the store (fastest and slowest of
// the samples) against the lock's time to live.
func RoundTrip(best, worst, ttl time.Duration) driver.Finding {
	f := driver.Finding{
		Check: "round trip",
		Found: fmt.Sprintf("%v fastest, %v slowest of %d; TTL %v", round(best), round(worst), Samples, ttl),
		Doc:   "docs/GUARANTEES.md",
	}
	switch {
	case worst >= ttl/3:
		f.Severity = driver.Fail
		f.Why = "A lease is renewed every TTL/3 and must reach the store within its validity; round trips this long lose leases that are still in use"
		f.Fix = fmt.Sprintf("A TTL of at least %v (--ttl, dlock.WithTTL), or a store closer to this host", (30 * worst).Round(time.Second))
	case worst >= ttl/20:
		f.Severity = driver.Warn
		f.Why = "Each acquisition's validity is the TTL less the round trip; this one eats more than 5% of it, and a slower one could lose a lease in use"
		f.Fix = fmt.Sprintf("A TTL of at least %v (--ttl, dlock.WithTTL)", (30 * worst).Round(time.Second))
	}
	return f
}

// Skew judges the store's clock, skew ahead of this host's within
// ±uncertain, for a backend whose clock reading is not one round trip
// (Clock does both for those where it is).
func Skew(skew, uncertain time.Duration, doc string) driver.Finding {
	f := driver.Finding{
		Check: "clock",
		Found: fmt.Sprintf("the store's clock is %v ahead of this host's (±%v)", round(skew), round(uncertain)),
		Doc:   doc,
	}
	if skew < 0 {
		f.Found = fmt.Sprintf("the store's clock is %v behind this host's (±%v)", round(-skew), round(uncertain))
	}
	if skew.Abs()-uncertain > MaxSkew {
		f.Severity = driver.Warn
		f.Why = "Leases are timed on this host's monotonic clock and the store's own timers, so the difference does not shorten them; " +
			"but expiry times compared across the two (dlock status, handles, logs) are off by it"
		f.Fix = "Synchronise both clocks (NTP, chrony)"
	}
	return f
}

// round rounds d for display: µs below a millisecond, else 0.01 ms.
func round(d time.Duration) time.Duration {
	if d.Abs() < time.Millisecond {
		return d.Round(time.Microsecond)
	}
	return d.Round(10 * time.Microsecond)
}

// Line is a finding on one line, as dlock doctor prints it: severity,
// check, what was found, and for a warning or failure why it matters, the
// fix and the docs.
func Line(f driver.Finding) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-4s  %s: %s", f.Severity, f.Check, f.Found)
	if f.Why != "" {
		fmt.Fprintf(&b, ". %s", f.Why)
	}
	if f.Fix != "" {
		fmt.Fprintf(&b, ". Fix: %s", f.Fix)
	}
	if f.Severity != driver.OK && f.Doc != "" {
		fmt.Fprintf(&b, ". See %s", f.Doc)
	}
	return b.String()
}
