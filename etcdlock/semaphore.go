package etcdlock

import (
	"context"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlockgo/dlock/driver"
)

// Semaphores. The holders and waiters of a semaphore's permits queue under
// <Prefix>/#sem/<name>/#, in the order of their create revisions; a key
// holds a permit when fewer than Limit keys are older than it. A crashed
// holder's key goes with its session's lease, and its permit with it.
//
// Permits are given back in any order, so no single key ahead of a waiter
// tells it when it may go: the waiter Limit places ahead can still be
// waiting when a holder closer to the front leaves. Instead:
//
//   - the first waiter (exactly Limit keys ahead of it, all holders)
//     watches the whole prefix for deletions: any holder's release
//     admits it;
//   - every later waiter watches only the key just ahead of it, for its
//     deletion or a put: a waiter that is admitted puts its key again
//     (which also makes its token, see admit), and the put tells the next
//     waiter that it is now first.
//
// So a release wakes one waiter, the first, whose admission wakes the
// second to take its place: two wake-ups per handoff, whatever the
// number of waiters, and no waiter misses a release. The first waiter
// also wakes, needlessly, when a waiter behind it gives up.

// attemptPermit is attempt for a semaphore: one transaction counts the
// keys of the queue (all older than the caller's) and puts the caller's
// key. A waiter reads what it waits for at wait's first check, off etcd's
// apply loop (see attempt).
// (etcd's comparisons cannot count keys, so TryLock on a full semaphore
// writes its key and deletes it.)
func (d *Driver) attemptPermit(ctx context.Context, s *session, q *lockReq, k keys, wait bool) (driver.Grant, error) {
	rctx, cancel := d.req(ctx)
	resp, err := d.c.Txn(rctx).Then(
		clientv3.OpGet(q.queue, clientv3.WithPrefix(), clientv3.WithCountOnly()),
		clientv3.OpPut(k.key, q.value, clientv3.WithLease(s.id), clientv3.WithPrevKV())).Commit()
	cancel()
	if err != nil {
		return driver.Grant{}, d.txnErr(ctx, s, k, q, err)
	}
	rev := resp.Header.Revision
	ahead := resp.Responses[0].GetResponseRange().GetCount()
	prev := resp.Responses[1].GetResponsePut().GetPrevKv()
	if prev == nil && ahead < int64(q.Limit) {
		return d.grant(s, q, k, rev, uint64(rev))
	}
	if !wait {
		d.abandon(s, k, false)
		return driver.Grant{}, &driver.HeldError{Name: q.Name}
	}
	myRev := rev
	if prev != nil {
		myRev = prev.CreateRevision // defensive: the slot's key was left, and counted
	}
	return d.wait(ctx, s, q, k, myRev, rev)
}

// permitCheck interprets what a semaphore waiter's check read: kvs, the
// newest keys of the queue up to the waiter's, its own first.
func permitCheck(st checked, q *lockReq, myRev int64, kvs []*mvccpb.KeyValue) checked {
	switch ahead := int64(len(kvs) - 1); {
	case ahead < int64(q.Limit):
		// holds
	case ahead == int64(q.Limit):
		st.t = target{key: q.queue, whole: true, max: myRev, count: ahead + 1}
	default:
		st.t = target{key: string(kvs[1].Key), rev: kvs[1].CreateRevision, puts: true, mod: kvs[1].ModRevision}
	}
	return st
}
