package redislock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/internal/redisutil"
)

// DefaultWaitTimeout is the default of Options.WaitTimeout.
const DefaultWaitTimeout = time.Second

// ErrNotReplicated is matched (errors.Is) by the error of an acquisition
// that fewer replicas than Options.WaitReplicas acknowledged in time. The
// lock was released: nothing is held.
var ErrNotReplicated = errors.New("redislock: grant not acknowledged by enough replicas")

// waitOptions returns the replica count and the WAIT timeout in
// milliseconds from o, with defaults applied.
func waitOptions(o Options) (int, int64) {
	if o.WaitReplicas <= 0 {
		return 0, 0
	}
	return o.WaitReplicas, max(redisutil.PositiveOr(o.WaitTimeout, DefaultWaitTimeout).Milliseconds(), 1)
}

// replicated passes on the grant g of an acquisition once d.waitReplicas
// replicas have it (see waitAck), and otherwise releases the lock and
// fails with ErrNotReplicated. Redis replicates asynchronously: a primary
// that dies before its replicas received a grant leaves a promoted replica
// on which the lock is free (and the fencing counter behind). WAIT closes
// most of that window; what remains is in Sentinel in docs/REDIS.md.
func (d *Driver) replicated(ctx context.Context, q *lockReq, g driver.Grant) (driver.Grant, error) {
	if d.waitReplicas <= 0 {
		return g, nil
	}
	if err := d.waitAck(ctx, q, "lock"); err != nil {
		return driver.Grant{}, d.abandon(ctx, q, err)
	}
	return g, nil
}

// errLostBeforeWait: the grant was gone when WAIT was about to run.
var errLostBeforeWait = fmt.Errorf("the lock was gone before the replicas were asked: %w", driver.ErrNotHeld)

// waitAck (op "lock" or "renew") renews q's lock and then runs WAIT,
// on one connection (a pipeline), and fails with ErrNotReplicated unless
// d.waitReplicas replicas acknowledged it; when the renew finds the lock
// gone, a renew fails with driver.ErrNotHeld alone.
//
// WAIT counts the replicas that received every write of its own
// connection, and the grant may have been written on another (of the
// pool, or the releaser's for a handoff); the renew, a write on WAIT's
// connection after the grant in the replication stream, makes a replica
// that has it have the grant too, and checks the lock is still q.Owner's.
//
// A renewal the replicas did not acknowledge fails without ending the
// lock, whose lease keeps the validity of the last acknowledged one: a
// primary cut off from its replicas and the sentinels still accepts
// renewals, but the replica they promote has only the last it received.
func (d *Driver) waitAck(ctx context.Context, q *lockReq, op string) error {
	n, err := d.wait(ctx, q)
	switch {
	case op == "renew" && errors.Is(err, driver.ErrNotHeld):
		return fmt.Errorf("redislock: renew %q: %w", q.Name, err)
	case err != nil:
		return fmt.Errorf("redislock: %s %q: waiting for replicas: %w", op, q.Name, errors.Join(err, ErrNotReplicated))
	case n < int64(d.waitReplicas):
		return fmt.Errorf("redislock: %s %q: %d of %d replicas acknowledged within %dms: %w",
			op, q.Name, n, d.waitReplicas, d.waitTimeout, ErrNotReplicated)
	}
	return nil
}

// wait is waitAck's pipeline; it returns WAIT's count of replicas.
func (d *Driver) wait(ctx context.Context, q *lockReq) (int64, error) {
	if _, ok := d.client.(*redis.ClusterClient); ok {
		return 0, errors.New("WaitReplicas is not supported on a Redis Cluster client")
	}
	s, keys, args, n, err := d.call(ctx, q, opRenew, d.channelArg)
	if err != nil {
		return 0, err
	}
	pipe := d.client.Pipeline()
	renew := pipe.Eval(ctx, s.Source(), keys, args[:n]...)
	wait := pipe.Do(ctx, "WAIT", d.waitReplicas, d.waitTimeout)
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, err
	}
	if n, err := renew.Int64(); err != nil || n != 1 {
		return 0, errors.Join(err, errLostBeforeWait)
	}
	return wait.Int64()
}
