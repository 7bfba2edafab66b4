package redislock

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/internal/redisutil"
)

// lockReq is a driver.Request resolved once, at the driver's entry, into
// what the scripts take: its kind in the layout, its keys and its TTL.
type lockReq struct {
	driver.Request
	kind *kind
	keys []string
	ttl  time.Duration // Request.TTL in whole milliseconds; 0 for a release
	args *boxedTTL     // the script arguments of ttl
}

// boxedTTL holds the script arguments that derive from a lock TTL, boxed.
type boxedTTL struct {
	ttl  time.Duration // in whole milliseconds
	ms   any           // int64: the TTL in milliseconds
	life any           // int64: the queue entry lifetime in milliseconds
}

// resolve resolves r, for a release, or else (withTTL) for a call that
// takes or extends the lock, whose TTL must be at least a millisecond.
// It rejects a mode the layout lacks, a semaphore without permits, and
// any request once the driver is closed (driver.ErrClosed).
func (d *Driver) resolve(r driver.Request, withTTL bool) (lockReq, error) {
	if d.closed.Load() {
		return lockReq{}, driver.ErrClosed
	}
	k, err := d.format.kind(r.Mode, r.Name)
	if err != nil {
		return lockReq{}, err
	}
	if r.Mode == driver.Permit && r.Limit < 1 {
		return lockReq{}, fmt.Errorf("redislock: semaphore %q: limit %d, want at least 1", r.Name, r.Limit)
	}
	q := lockReq{Request: r, kind: k, args: releaseTTL}
	if withTTL {
		ms := r.TTL.Milliseconds()
		if ms < 1 {
			return lockReq{}, fmt.Errorf("redislock: TTL %v is below one millisecond", r.TTL)
		}
		q.ttl = time.Duration(ms) * time.Millisecond
		// From a one-entry cache: a Locker's leases mostly share one TTL.
		if q.args = d.lastTTL.Load(); q.args == nil || q.args.ttl != q.ttl {
			q.args = &boxedTTL{ttl: q.ttl, ms: ms, life: d.entryLifetime(q.ttl).Milliseconds()}
			d.lastTTL.Store(q.args)
		}
	}
	q.keys = k.keys(d.prefix, r.Name)
	return q, nil
}

// call returns the script of op (opTry, opWait, opRenew, opRelease) on
// q's lock, its keys and its arguments (n of args); channel is the one a
// waiter's queue entry names (opWait).
func (d *Driver) call(ctx context.Context, q *lockReq, op, channel any) (s *redisutil.Script, keys []string, args [11]any, n int, err error) {
	k, b := q.kind, q.args
	if op == opRelease {
		b = releaseTTL
	}
	if k.script != nil {
		arg, changed, publish := noArg, noArg, noArg
		switch q.Mode {
		case driver.Permit:
			arg = q.Limit
		case driver.Leader:
			arg, changed = q.Value, d.electionChannel(q.Name)
			if publish, err = d.publishArg(ctx); err != nil {
				return nil, nil, args, 0, err
			}
		}
		args = [11]any{op, q.Owner, b.ms, d.fenceTTL, q.Name, channel, b.life, k.tag, arg, changed, publish}
		return k.script, q.keys, args, 11, nil
	}
	switch {
	case op == opTry:
		return acquireScript, q.keys[:2], [11]any{q.Owner, b.ms, d.fenceTTL}, 3, nil
	case op == opWait:
		return acquireScript, q.keys, [11]any{q.Owner, b.ms, d.fenceTTL, channel, b.life}, 5, nil
	case op == opRenew:
		return renewScript, q.keys[:1], [11]any{q.Owner, b.ms}, 2, nil
	case k.plain:
		// Whether the Drivers on this server listen by SSUBSCRIBE; when
		// that could not be told, PUBLISH, which a waiter that listens by
		// SSUBSCRIBE misses: it tries again on its timer then.
		publish, _ := d.publishArg(ctx)
		return plainReleaseScript, q.keys[:1], [11]any{q.Owner, publish}, 2, nil
	}
	return releaseScript, q.keys, [11]any{q.Owner, d.fenceTTL}, 2, nil
}

// do runs op on q's lock (see call).
func (d *Driver) do(ctx context.Context, q *lockReq, op, channel any) *redis.Cmd {
	s, keys, args, n, err := d.call(ctx, q, op, channel)
	if err != nil {
		cmd := redis.NewCmd(ctx)
		cmd.SetErr(err)
		return cmd
	}
	return d.run(ctx, s, keys, args[:n]...)
}

// publishArg is the argument that tells a script to announce a change by
// SPUBLISH (byShard), or by PUBLISH (see useShards).
func (d *Driver) publishArg(ctx context.Context) (any, error) {
	shard, err := d.useShards(ctx)
	if shard {
		return byShard, err
	}
	return noArg, err
}

// TryLock makes one attempt to take the lock, in one script (see Lock
// kinds and Layouts in docs/REDIS.md), and never queues. A lock held by
// another owner gives a *driver.HeldError with the holder's remaining TTL;
// one r.Owner already holds is renewed and reported acquired, with its
// current token. On any other error (the outcome unknown) TryLock releases
// the lock in case the script took it.
func (d *Driver) TryLock(ctx context.Context, r driver.Request) (driver.Grant, error) {
	q, err := d.resolve(r, true)
	if err != nil {
		return driver.Grant{}, err
	}
	_, g, err := d.try(ctx, &q, opTry, nil)
	return g, err
}

// try makes one acquisition attempt of q, op opTry (never queue) or
// opWait (queue, or renew the entry, whose grant goes to channel), and
// returns its outcome with the Grant, or the error: a *driver.HeldError
// when another holds the lock; after any other error (which the script
// may have preceded) nothing is held or queued. Where the Driver waits
// for replicas, WAIT follows the script in one pipeline, so that it
// counts the replicas that have the grant the script wrote on that
// connection; a grant too few acknowledged is released and fails with
// ErrNotReplicated.
func (d *Driver) try(ctx context.Context, q *lockReq, op, channel any) (attempt, driver.Grant, error) {
	start := time.Now()
	replicas, err := d.replicasToWait(ctx)
	if err != nil {
		return attempt{}, driver.Grant{}, fmt.Errorf("redislock: lock %q: %w", q.Name, err)
	}
	var cmd *redis.Cmd
	acked, waitErr := replicas, error(nil)
	if replicas > 0 {
		cmd, acked, waitErr = d.scriptAndWait(ctx, q, op, channel, replicas)
	} else {
		cmd = d.do(ctx, q, op, channel)
	}
	var a attempt
	if cmd == nil {
		err = waitErr
	} else {
		a, err = acquireReply(cmd)
	}
	if err != nil {
		return attempt{}, driver.Grant{}, d.abandon(ctx, q, fmt.Errorf("redislock: lock %q: %w", q.Name, err))
	}
	a.sent = start
	if !a.got {
		return a, driver.Grant{}, &driver.HeldError{Name: q.Name, Remaining: a.remaining(0)}
	}
	if err := d.notReplicated(q, "lock", waitErr, acked, replicas); err != nil {
		return a, driver.Grant{}, d.abandon(ctx, q, err)
	}
	return a, driver.Grant{Token: a.token, Expires: start.Add(q.ttl)}, nil
}

// attempt is the outcome of one acquisition script call.
type attempt struct {
	got   bool      // the caller holds the lock, with token
	token uint64    // when got
	pttl  int64     // when !got: the holder's remaining time (PTTL)
	seen  uint64    // when !got: the fencing counter at the call
	sent  time.Time // when the call was sent (set by try)
}

// remaining is the holder's remaining time plus extra milliseconds; 0
// when it is unknown (a PTTL of -1, no expiry, or -2, gone).
func (a attempt) remaining(extra int64) time.Duration {
	if a.pttl < 0 {
		return 0
	}
	return time.Duration(a.pttl+extra) * time.Millisecond
}

// acquireReply reads the reply of an acquisition: the token (acquire.lua
// when the caller holds the lock), {1, token} (the kinds' scripts), or
// {0, pttl, counter}.
func acquireReply(cmd *redis.Cmd) (attempt, error) {
	v, err := cmd.Result()
	if err != nil {
		return attempt{}, err
	}
	if tok, ok := v.(int64); ok {
		return attempt{got: true, token: uint64(tok)}, nil
	}
	res, err := cmd.Int64Slice()
	if err != nil || len(res) < 2 {
		return attempt{}, fmt.Errorf("unexpected reply %v", v)
	}
	if res[0] == 1 {
		return attempt{got: true, token: uint64(res[1])}, nil
	}
	a := attempt{pttl: res[1]}
	if len(res) > 2 {
		a.seen = uint64(res[2])
	}
	return a, nil
}

// Renew extends the lock to r.TTL if r.Owner holds it in r.Mode (a
// reader or permit holder gets a new expiry score), and returns the new
// expiry, measured from before the request was sent. It returns an error
// wrapping driver.ErrNotHeld when the lock is gone or another's.
func (d *Driver) Renew(ctx context.Context, r driver.Request) (time.Time, error) {
	q, err := d.resolve(r, true)
	if err != nil {
		return time.Time{}, err
	}
	start := time.Now()
	replicas, err := d.replicasToWait(ctx)
	if err != nil {
		return time.Time{}, fmt.Errorf("redislock: renew %q: %w", r.Name, err)
	}
	if replicas > 0 {
		if err := d.waitAck(ctx, &q, replicas, "renew"); err != nil {
			return time.Time{}, err
		}
		return start.Add(q.ttl), nil
	}
	n, err := d.do(ctx, &q, opRenew, d.channelArg).Int64()
	if err != nil {
		return time.Time{}, fmt.Errorf("redislock: renew %q: %w", r.Name, err)
	}
	if n != 1 {
		return time.Time{}, fmt.Errorf("redislock: renew %q: %w", r.Name, driver.ErrNotHeld)
	}
	return start.Add(q.ttl), nil
}

// Unlock releases the lock if r.Owner holds it (in r.Mode) and, in the
// same script, hands it on to the queue's first live waiters (see Lock
// kinds in docs/REDIS.md); in LayoutRedsync, it deletes the key and wakes
// dlock's waiters. The error wraps driver.ErrNotHeld when r.Owner did not
// hold the lock.
func (d *Driver) Unlock(ctx context.Context, r driver.Request) error {
	q, err := d.resolve(r, false)
	if err != nil {
		return err
	}
	held, err := d.release(ctx, &q)
	if err != nil {
		return err
	}
	if !held {
		return fmt.Errorf("redislock: unlock %q: %w", r.Name, driver.ErrNotHeld)
	}
	return nil
}

// release runs the release script of q's lock: it drops q.Owner's queue
// entry and, if q.Owner holds the lock, releases it and hands it on. It
// reports whether q.Owner held the lock.
func (d *Driver) release(ctx context.Context, q *lockReq) (bool, error) {
	n, err := d.do(ctx, q, opRelease, d.channelArg).Int64()
	if err != nil {
		return false, fmt.Errorf("redislock: unlock %q: %w", q.Name, err)
	}
	return n == 1, nil
}

// Resume implements driver.Resumer: a lock is a key with a TTL, which any
// process holding the acquisition's owner value may renew and release.
// It renews the lock, owner-checked, as Renew does; a lock that
// expired or passed to another owner is left as it is.
func (d *Driver) Resume(ctx context.Context, r driver.Request) (driver.Grant, error) {
	return driver.ResumeByRenew(ctx, d, r)
}
