package objlock

import (
	"context"
	"crypto/rand"
	"errors"
	"time"

	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/internal/doctor"
)

// Diagnose implements driver.Diagnoser: the round trip (reads of a
// missing object of its own), the store's clock against this host's (the
// time of those responses, as the driver judges expiry by it), and
// whether the store honours conditional writes (Probe, on an object of
// its own under the prefix, which it removes). A store that ignores them
// fails: two owners could hold one lock.
func (d *Driver) Diagnose(ctx context.Context, ttl time.Duration) ([]driver.Finding, error) {
	const doc = "docs/OBJECTSTORES.md"
	key := d.cfg.Prefix + "probe/" + rand.Text()
	var skew, uncertain time.Duration
	best, worst, err := doctor.RoundTrips(ctx, func(ctx context.Context) error {
		start := time.Now()
		_, _, now, err := d.store.Read(ctx, key)
		rtt := time.Since(start)
		if err == nil && (uncertain == 0 || rtt/2+now.Max.Sub(now.Min)/2 < uncertain) {
			// The store's time lies in [Min, Max], read within the round trip.
			uncertain = rtt/2 + now.Max.Sub(now.Min)/2
			skew = now.Min.Add(now.Max.Sub(now.Min) / 2).Sub(start.Add(rtt / 2))
		}
		return err
	})
	if err != nil {
		return nil, d.errorf("diagnose: %w", err)
	}
	fs := []driver.Finding{doctor.RoundTrip(best, worst, ttl), doctor.Skew(skew, uncertain, doc)}
	f := driver.Finding{Check: "conditional writes", Found: "a second create and a replace on a wrong version were refused", Doc: doc + "#faults"}
	if d.wrong == "" {
		f.Found = "not checked: no version known to be wrong for this store"
	} else if err := d.Probe(ctx, rand.Text(), d.wrong); err != nil {
		if !errors.Is(err, errIgnored) {
			return nil, err // the store failed, not the check
		}
		f.Severity = driver.Fail
		f.Found = err.Error()
		f.Why = "The store accepted a write whose condition failed: two owners could hold one lock"
		f.Fix = "Use a store (or gateway version) that honours If-None-Match and If-Match on writes, or GCS preconditions"
	}
	return append(fs, f), nil
}
