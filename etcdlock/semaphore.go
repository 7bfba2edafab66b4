package etcdlock

import "go.etcd.io/etcd/api/v3/mvccpb"

// Semaphores (docs/ETCD.md has the reasoning): keys queue under
// <Prefix>/#sem/<name>/# by create revision, and a key holds a permit when
// fewer than Limit keys are older. Permits come back in any order, so the
// first waiter (exactly Limit keys ahead) watches the whole prefix for
// deletions, and every later waiter the key just ahead of it, for its
// deletion or a put: an admitted waiter puts its key again (see admit),
// which tells the next that it is now first.

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
