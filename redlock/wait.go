package redlock

import (
	"context"
	"crypto/tls"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/internal/redisutil"
)

// Bounds of the random pauses Lock takes before an attempt, so that
// contenders do not retry in step and split the vote again.
const (
	minSpread = time.Millisecond
	maxSpread = 100 * time.Millisecond
)

// Lock takes the lock, waiting as long as ctx allows, as docs/REDLOCK.md
// says under Protocol. When ctx ends first, Lock returns its error (see
// final) and holds nothing: every attempt undoes itself on every node
// before it returns. The wait ends early only when the Driver closes
// (driver.ErrClosed), when so many nodes refuse for good that no quorum is
// left, or on an error other than "held" or "no quorum".
func (d *Driver) Lock(ctx context.Context, r driver.Request) (driver.Grant, error) {
	t, err := d.resolve(r, true)
	if err != nil {
		return driver.Grant{}, err
	}
	g, o, err := d.acquire(ctx, &t)
	if d.settled(ctx, err, o) {
		return g, d.final(ctx, err)
	}
	gt, gerr := d.gates.Enter(ctx, t.name, d.done)
	if gerr != nil {
		return driver.Grant{}, d.final(ctx, err)
	}
	defer gt.Leave(struct{}{})
	// Watch before the next attempt: a release after it is then heard.
	w, werr := d.sub.watch(ctx, t.name)
	if werr != nil {
		return driver.Grant{}, d.final(ctx, err)
	}
	defer d.sub.unwatch(w)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	misses := 0 // attempts in a row that saw no holder with a quorum
	for {
		start := time.Now()
		g, o, err = d.acquire(ctx, &t)
		if d.settled(ctx, err, o) {
			return g, d.final(ctx, err)
		}
		took := time.Since(start)
		spread := spreadWindow(took, misses)
		var delay time.Duration
		if o.rival >= d.quorum {
			misses = 0
			delay = redisutil.PositiveOr(o.remaining, t.ttl) + rand.N(spread)
		} else {
			misses++
			delay = rand.N(spreadWindow(took, misses))
			if o.remaining > 0 {
				delay = min(delay, o.remaining)
			}
		}
		timer.Reset(delay)
		select {
		case <-ctx.Done():
			return driver.Grant{}, d.final(ctx, err)
		case <-d.done:
			return driver.Grant{}, driver.ErrClosed
		case <-timer.C:
			continue
		case <-w.wake:
		}
		// Released: every Driver's first waiter heard it at once.
		timer.Reset(rand.N(spread))
		select {
		case <-ctx.Done():
			return driver.Grant{}, d.final(ctx, err)
		case <-d.done:
			return driver.Grant{}, driver.ErrClosed
		case <-timer.C:
		}
		select { // the other nodes' messages for the same release
		case <-w.wake:
		default:
		}
	}
}

// settled reports whether an attempt's result, err and o, ends Lock:
// success, ctx's end, the Driver's close, or an error other than "held by
// another owner" and a transient lack of quorum.
func (d *Driver) settled(ctx context.Context, err error, o outcome) bool {
	switch {
	case err == nil || ctx.Err() != nil || d.closed.Load():
		return true
	case errors.Is(err, driver.ErrNotAcquired):
		return false
	case errors.Is(err, driver.ErrNoQuorum):
		return len(d.nodes)-o.refused < d.quorum
	}
	return true
}

// final is Lock's error once settled, err being the last attempt's:
// driver.ErrClosed once the Driver closed; when ctx has ended, ctx's error
// joined with err unless err only said the lock was held; else err.
func (d *Driver) final(ctx context.Context, err error) error {
	switch {
	case err == nil:
		return nil
	case d.closed.Load():
		return driver.ErrClosed
	case ctx.Err() == nil:
		return err
	case errors.Is(err, driver.ErrNotAcquired) || errors.Is(err, ctx.Err()):
		return ctx.Err()
	}
	return errors.Join(ctx.Err(), err)
}

// refusal reports whether a node's error refuses the request for good,
// so that retrying cannot help: a denied command or key (NOPERM), a wrong
// or missing password, a certificate the client rejected.
func refusal(err error) bool {
	var cert *tls.CertificateVerificationError
	return redis.HasErrorPrefix(err, "NOPERM") || redis.HasErrorPrefix(err, "WRONGPASS") ||
		redis.HasErrorPrefix(err, "NOAUTH") || errors.As(err, &cert)
}

// spreadWindow is the span of a random pause: a millisecond plus twice
// the attempt's duration (so that contenders' attempts rarely overlap),
// doubled for each miss in a row, up to maxSpread.
func spreadWindow(took time.Duration, misses int) time.Duration {
	w := minSpread + 2*took
	for range min(misses, 8) {
		w *= 2
	}
	return min(w, maxSpread)
}
