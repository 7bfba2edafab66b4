package redislock

import (
	"context"
	"errors"
	"fmt"
	"strings"
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

// waitUnknown is the replica count of a Driver that has not yet asked the
// server whether it has replicas (Options.WaitReplicas zero).
const waitUnknown = -1

// waitOptions returns the replica count (waitUnknown for the automatic
// default) and the WAIT timeout in milliseconds from o.
func waitOptions(o Options) (int64, int64) {
	timeout := max(redisutil.PositiveOr(o.WaitTimeout, DefaultWaitTimeout).Milliseconds(), 1)
	switch {
	case o.WaitReplicas < 0:
		return 0, timeout
	case o.WaitReplicas == 0:
		return waitUnknown, timeout
	}
	return int64(o.WaitReplicas), timeout
}

// replicasToWait returns how many replicas a grant or renewal waits for:
// Options.WaitReplicas, or for its zero value 1 if the server has
// replicas, which the first call asks (and a call that fails to ask asks
// again). An answer of none is asked again after replicaReask, by the
// first call after it: a replica may attach to a primary that started
// alone, and a fresh Cluster may not list its replicas yet. An answer of
// one is kept.
func (d *Driver) replicasToWait(ctx context.Context) (int64, error) {
	if n := d.waitReplicas.Load(); n != waitUnknown {
		return n, nil
	}
	d.waitAsk.Lock()
	defer d.waitAsk.Unlock()
	if n := d.waitReplicas.Load(); n != waitUnknown {
		return n, nil
	}
	has, err := hasReplicas(ctx, d.client)
	reask := true
	if err != nil && strings.HasPrefix(err.Error(), "NOPERM") {
		// A user whose ACL lacks INFO (or CLUSTER SLOTS): the Driver
		// cannot know, and does not wait.
		d.log.Warn("redislock: not waiting for replicas: the server refused to say whether it has any; grant the user +info, or set wait_replicas", "error", err)
		has, err, reask = false, nil, false
	}
	if err != nil {
		return 0, fmt.Errorf("redislock: asking the server for its replicas (Options.WaitReplicas): %w", err)
	}
	var n int64
	if has {
		n = 1
	}
	d.waitReplicas.Store(n)
	if n == 0 && reask {
		d.mu.Lock()
		if !d.closed.Load() {
			// A timer rather than a clock read on every call: the answer
			// is read on every acquisition and renewal.
			d.reask = time.AfterFunc(d.reaskAfter, func() { d.waitReplicas.CompareAndSwap(0, waitUnknown) })
		}
		d.mu.Unlock()
	}
	return n, nil
}

// replicaReask is how long a Driver that found no replica keeps that
// answer (see replicasToWait).
const replicaReask = 10 * time.Second

// hasReplicas reports whether the server behind c has a replica: a
// Cluster, one of a master in CLUSTER SLOTS; a primary, connected_slaves
// in INFO replication.
func hasReplicas(ctx context.Context, c redis.UniversalClient) (bool, error) {
	switch c := c.(type) {
	case *redis.ClusterClient:
		//lint:ignore SA1019 CLUSTER SHARDS needs Redis 7; CLUSTER SLOTS answers on every version
		slots, err := c.ClusterSlots(ctx).Result()
		if err != nil {
			return false, err
		}
		for _, s := range slots {
			if len(s.Nodes) > 1 {
				return true, nil
			}
		}
		return false, nil
	case *redis.Client:
		info, err := c.Info(ctx, "replication").Result()
		if err != nil {
			return false, err
		}
		v := redisutil.InfoField(info, "connected_slaves")
		return v != "" && v != "0", nil
	}
	return false, nil // a Ring: no replicas to ask for
}

// replicated passes on the grant g of a handoff, which the releaser's
// script wrote, once d.waitReplicas replicas have it (see waitAck), and
// otherwise releases the lock and fails with ErrNotReplicated. Redis
// replicates asynchronously: a primary that dies before its replicas
// received a grant leaves a promoted replica on which the lock is free
// (and the fencing counter behind). WAIT closes most of that window; what
// remains is in Sentinel in docs/REDIS.md.
func (d *Driver) replicated(ctx context.Context, q *lockReq, g driver.Grant) (driver.Grant, error) {
	n, err := d.replicasToWait(ctx)
	if err != nil {
		return driver.Grant{}, d.abandon(ctx, q, err)
	}
	if n == 0 {
		return g, nil
	}
	if err := d.waitAck(ctx, q, n, "lock"); err != nil {
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
// (An acquisition's own script runs in WAIT's pipeline: see try.)
//
// A renewal the replicas did not acknowledge fails without ending the
// lock, whose lease keeps the validity of the last acknowledged one: a
// primary cut off from its replicas and the sentinels still accepts
// renewals, but the replica they promote has only the last it received.
func (d *Driver) waitAck(ctx context.Context, q *lockReq, replicas int64, op string) error {
	n, err := d.wait(ctx, q, replicas)
	if op == "renew" && errors.Is(err, driver.ErrNotHeld) {
		return fmt.Errorf("redislock: renew %q: %w", q.Name, err)
	}
	return d.notReplicated(q, op, err, n, replicas)
}

// notReplicated is the error of op ("lock" or "renew") on q's lock whose
// WAIT failed with err or counted n of the replicas asked for, or nil.
func (d *Driver) notReplicated(q *lockReq, op string, err error, n, replicas int64) error {
	switch {
	case err != nil:
		return fmt.Errorf("redislock: %s %q: waiting for replicas: %w", op, q.Name, errors.Join(err, ErrNotReplicated))
	case n < replicas:
		return fmt.Errorf("redislock: %s %q: %d of %d replicas acknowledged within %dms: %w",
			op, q.Name, n, replicas, d.waitTimeout, ErrNotReplicated)
	}
	return nil
}

// wait is waitAck's pipeline; it returns WAIT's count of replicas.
func (d *Driver) wait(ctx context.Context, q *lockReq, replicas int64) (int64, error) {
	renew, n, err := d.scriptAndWait(ctx, q, opRenew, d.channelArg, replicas)
	if err != nil {
		return 0, err
	}
	if v, err := renew.Int64(); err != nil || v != 1 {
		return 0, errors.Join(err, errLostBeforeWait)
	}
	return n, nil
}

// scriptAndWait runs the script of op on q's lock (see call) and WAIT for
// replicas after it, on one connection (a pipeline), and returns the
// script's command and WAIT's count; err is the script's error, or else
// WAIT's. On a Cluster it runs on the master of the lock's slot, whose
// replicas WAIT counts, and waits out a slot's move as run does
// (reloading the slot map, which a pipeline sent to one node does not do
// by itself). It sends EVALSHA, and EVAL after NOSCRIPT, as run does.
func (d *Driver) scriptAndWait(ctx context.Context, q *lockReq, op, channel any, replicas int64) (*redis.Cmd, int64, error) {
	s, keys, args, n, err := d.call(ctx, q, op, channel)
	if err != nil {
		return nil, 0, err
	}
	cluster, _ := d.client.(*redis.ClusterClient)
	var r retrier
	for {
		var pipe redis.Pipeliner
		if c := cluster; c != nil {
			node, err := c.MasterForKey(ctx, keys[0])
			if err != nil {
				return nil, 0, err
			}
			pipe = node.Pipeline()
		} else {
			pipe = d.client.Pipeline()
		}
		var script *redis.Cmd
		if r.byEval {
			script = pipe.Eval(ctx, s.Source(), keys, args[:n]...)
		} else {
			script = pipe.EvalSha(ctx, s.Hash(), keys, args[:n]...)
		}
		wait := pipe.Do(ctx, "WAIT", replicas, d.waitTimeout)
		_, _ = pipe.Exec(ctx) // each command keeps its own error
		err := script.Err()
		if cluster != nil && err != nil && movingSlot(err) {
			cluster.ReloadState(ctx)
		}
		if r.again(ctx, err, cluster != nil) {
			continue
		}
		if err != nil {
			return script, 0, err
		}
		count, err := wait.Int64()
		return script, count, err
	}
}
