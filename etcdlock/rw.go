package etcdlock

import (
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Readers-writer locks (docs/ETCD.md): keys queue under <Prefix>/#rw/<name>/#
// by create revision, readers' starting with "r" and writers' with "w" (so
// the write keys are a range of their own). A writer holds when its key is
// the oldest and waits as a mutex's waiter does; a reader holds when no
// write key is older and waits for the newest older one. TryLock for
// reading fails while any write key exists. Tokens: see admit.

// readerOps are the ranges a reader's check reads: its own key, and the
// newest key created before it under writes, the write keys' prefix.
func readerOps(k keys, writes string, myRev int64, extra []clientv3.OpOption) []clientv3.Op {
	own := append([]clientv3.OpOption{clientv3.WithKeysOnly()}, extra...)
	return []clientv3.Op{clientv3.OpGet(k.key, own...), clientv3.OpGet(writes, newest(1, myRev, extra)...)}
}

// readerCheck interprets what readerOps read.
func readerCheck(st checked, myRev int64, resps []*clientv3.GetResponse) checked {
	if own := resps[0].Kvs; len(own) == 0 || own[0].CreateRevision != myRev {
		st.gone = true
		return st
	}
	if w := resps[1].Kvs; len(w) > 0 {
		st.t = target{key: string(w[0].Key), rev: w[0].CreateRevision}
	}
	return st
}
