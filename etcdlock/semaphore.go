package etcdlock

import "go.etcd.io/etcd/api/v3/mvccpb"

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
