package redlock

import (
	"context"
	"fmt"
	"math/bits"
	"time"

	"github.com/dlockgo/dlock/driver"
)

// outcome is what one acquisition attempt saw: Lock's waiting policy
// decides from it how long to wait before the next attempt.
type outcome struct {
	got    int // nodes where the caller took the lock
	failed int // nodes that did not answer (in time)
	// rival is the most nodes held by any one other owner. A rival with
	// a quorum holds the lock; without one, the attempt lost a split vote
	// (or the holder hides behind nodes that did not answer).
	rival     int
	remaining time.Duration // shortest remaining TTL of other owners' keys; 0: unknown or none
	// refused is how many nodes refused the request for good (see
	// refusal): with fewer than a quorum left, waiting is pointless.
	refused int
}

// target is a driver.Request resolved once, at the driver's entry: the
// lock's key, its counter's and the owner, each boxed once as a command
// argument for every node and phase, and the TTL as the scripts take it.
type target struct {
	lock, fence, owner any // strings
	name               string
	ms                 int64         // the TTL in whole milliseconds; 0 for a release
	ttl                time.Duration // the TTL ms stands for
	validity           time.Duration // ttl less the drift allowance
}

// resolve resolves r, for a release, or else (withTTL) for a call that
// takes or extends the lock, whose TTL must be at least a millisecond.
func (d *Driver) resolve(r driver.Request, withTTL bool) (target, error) {
	if d.closed.Load() {
		return target{}, driver.ErrClosed
	}
	lock, fence := d.keys(r.Name)
	t := target{lock: lock, fence: fence, owner: r.Owner, name: r.Name}
	if withTTL {
		if t.ms = r.TTL.Milliseconds(); t.ms < 1 {
			return target{}, fmt.Errorf("redlock: TTL %v is below one millisecond", r.TTL)
		}
		t.ttl = r.TTL.Truncate(time.Millisecond)
		t.validity = t.ttl - d.allowance(t.ttl)
	}
	return t, nil
}

// keys returns the lock's key and its fencing counter's, which share the
// hash tag {name}, cut from one string.
func (d *Driver) keys(name string) (lock, fence string) {
	s := d.prefix + "{" + name + "}:fence"
	return s[:len(s)-len(":fence")], s
}

// TryLock makes one attempt to take the lock on a quorum of the nodes, all
// asked in parallel; a failed attempt, undone on every node first, leaves
// nothing held, and its error is as docs/REDLOCK.md says under
// Protocol (a quorum that answered too late to leave any validity is no
// quorum).
func (d *Driver) TryLock(ctx context.Context, r driver.Request) (driver.Grant, error) {
	t, err := d.resolve(r, true)
	if err != nil {
		return driver.Grant{}, err
	}
	g, _, err := d.acquire(ctx, &t)
	return g, err
}

// acquire is one attempt: phase 1 on every node, then phase 2 when the
// quorum's counters differ.
func (d *Driver) acquire(ctx context.Context, t *target) (driver.Grant, outcome, error) {
	var o outcome
	if d.closed.Load() {
		return driver.Grant{}, o, driver.ErrClosed
	}
	start := time.Now()
	replies := d.fanout(ctx, d.nodeTimeout, quorumSame, acquireScript, d.all(), t, t.ms, d.fenceTTL)

	var (
		got, held uint64 // masks of nodes
		token     uint64
		same      = true
		holders   []string // other owners, in contention only
		first     nodeErr
	)
	for _, rp := range replies {
		if rp.err == nil {
			switch v := rp.val.(type) {
			case int64:
				if got != 0 && uint64(v) != token {
					same = false
				}
				got |= 1 << rp.node
				token = max(token, uint64(v))
				continue
			case []any:
				if len(v) == 2 {
					pttl, ok1 := v[0].(int64)
					holder, ok2 := v[1].(string)
					if ok1 && ok2 {
						held |= 1 << rp.node
						holders = append(holders, holder)
						if rem := time.Duration(pttl) * time.Millisecond; rem > 0 && (o.remaining == 0 || rem < o.remaining) {
							o.remaining = rem
						}
						continue
					}
				}
			}
			rp.err = errUnexpected
		}
		o.failed++
		// errNodeTimeout: the nodes a quorum left behind, no need to look.
		refused := rp.err != errNodeTimeout && refusal(rp.err)
		if refused {
			o.refused++
		}
		if first.err == nil || refused && o.refused == 1 { // a refusal is the cause to report
			first = nodeErr{rp.node, rp.err}
		}
	}
	o.got = bits.OnesCount64(got)
	o.rival = mostCommon(holders)

	if o.got >= d.quorum {
		if d.fencing && !same {
			n := count(d.fanout(ctx, d.nodeTimeout, quorumOnes, fenceScript, got, t, int64(token), d.fenceTTL))
			if n.yes < d.quorum {
				d.undo(ctx, t, d.all()&^held, true)
				return driver.Grant{}, o, d.noQuorum("lock", t.name, n.yes, "confirmed the fencing token", n.firstErr)
			}
		}
		expires := start.Add(t.validity)
		if took := time.Since(start); !time.Now().Before(expires) {
			d.undo(ctx, t, d.all()&^held, true)
			return driver.Grant{}, o, fmt.Errorf("redlock: lock %q: %w: a quorum took %v to answer, more than the TTL %v less the drift allowance %v",
				t.name, driver.ErrNoQuorum, took, t.ttl, t.ttl-t.validity)
		}
		return driver.Grant{Token: token, Expires: expires}, o, nil
	}

	// Failed. Undo on every node that may hold our key: those we got and
	// those that did not answer (our SET may have landed after all). Tell
	// waiters unless another owner holds a quorum: they may be waiting on
	// the keys we are about to delete.
	if o.got > 0 || o.failed > 0 {
		d.undo(ctx, t, d.all()&^held, o.got > 0 && o.rival < d.quorum)
	}
	if answered := o.got + bits.OnesCount64(held); answered < d.quorum {
		return driver.Grant{}, o, d.noQuorum("lock", t.name, answered, "answered", first)
	}
	return driver.Grant{}, o, &driver.HeldError{Name: t.name, Remaining: o.remaining}
}

// mostCommon returns how often the most frequent value occurs in s.
func mostCommon(s []string) int {
	best := 0
	for i := range s {
		n := 0
		for j := i; j < len(s); j++ {
			if s[j] == s[i] {
				n++
			}
		}
		best = max(best, n)
	}
	return best
}

// Renew extends the lock to r.TTL on every node where r.Owner holds it,
// all asked in parallel. When a quorum confirms it returns the new expiry:
// the instant before sending, plus the TTL, less the drift allowance. The
// error wraps driver.ErrNotHeld when fewer than a quorum can still hold it,
// and driver.ErrNoQuorum (transient to dlock) when too few answered to tell.
func (d *Driver) Renew(ctx context.Context, r driver.Request) (time.Time, error) {
	tg, err := d.resolve(r, true)
	if err != nil {
		return time.Time{}, err
	}
	start := time.Now()
	t := count(d.fanout(ctx, d.nodeTimeout, quorumOnes, renewScript, d.all(), &tg, tg.ms, d.fenceTTL))
	switch {
	case t.yes >= d.quorum:
		return start.Add(tg.validity), nil
	case t.yes+t.failed < d.quorum:
		return time.Time{}, fmt.Errorf("redlock: renew %q: %w: held on %d of %d nodes, %d needed",
			r.Name, driver.ErrNotHeld, t.yes, len(d.clients), d.quorum)
	}
	return time.Time{}, d.noQuorum("renew", r.Name, t.yes, "confirmed", t.firstErr)
}

// Unlock deletes the lock on every node where r.Owner holds it, all asked
// in parallel, and each node that deleted it tells its subscribers. It
// returns nil once a quorum has deleted it, or answered with at least one
// node holding it; an error wrapping driver.ErrNotHeld when a quorum
// answered and none held it; else one wrapping driver.ErrNoQuorum (nodes
// that did not answer keep the lock until its TTL runs out). A node has
// ten node timeouts to answer, not one (see docs/REDLOCK.md).
func (d *Driver) Unlock(ctx context.Context, r driver.Request) error {
	tg, err := d.resolve(r, false)
	if err != nil {
		return err
	}
	t := count(d.fanout(ctx, d.nodeTimeout*releaseTimeoutFactor, quorumOnes, releaseScript, d.all(), &tg, d.channelArg, tg.name))
	switch answered := t.yes + t.no; {
	case answered < d.quorum:
		return d.noQuorum("unlock", r.Name, answered, "answered", t.firstErr)
	case t.yes == 0:
		return fmt.Errorf("redlock: unlock %q: %w", r.Name, driver.ErrNotHeld)
	}
	return nil
}

// allowance is the clock-drift allowance for a lock of the given TTL.
func (d *Driver) allowance(ttl time.Duration) time.Duration {
	return ttl/(1/DriftFactor) + d.drift
}

// Resume implements driver.Resumer: a lock is a key with a TTL on each
// node, which any process holding the acquisition's owner value may
// renew and release. It renews the lock, owner-checked, as Renew
// does; a lock that expired or passed to another owner is left as it is.
func (d *Driver) Resume(ctx context.Context, r driver.Request) (driver.Grant, error) {
	return driver.ResumeByRenew(ctx, d, r)
}
