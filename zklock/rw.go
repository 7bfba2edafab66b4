package zklock

import "slices"

// The readers-writer lock is the classic ZooKeeper recipe. Readers and
// writers queue ephemeral sequential nodes, named _c_<guid>-read#<seq> and
// _c_<guid>-write#<seq>, under the name's znode <prefix>/#rw/<name>, and
// the sequence order is the order of service:
//
//   - a writer holds the lock when its node is the lowest; it waits for the
//     node just before its own, of either kind;
//   - a reader holds it when no write node is lower than its own; it waits
//     for the nearest lower write node.
//
// So a waiting writer stops the readers that come after it (no writer
// starvation), consecutive readers hold together, and each waiter watches
// one node: a release wakes only the waiters it lets in (the readers
// behind a writer all wake when it releases, and all hold), or the one
// waiter that must now wait for another node.
//
// A holder's release sets its node's data in the transaction that deletes
// it (see remove), so a change of a write node's data means that the
// writer held the lock, as the lowest node: the waiter just behind it,
// writer or reader, holds the lock now without listing the children.

// writePlan is the plan of a writer at index i of locks, and of a mutex's
// or an election's node, all of whose nodes are of one kind: a change of
// the data of the node before it means that node held the lock.
func writePlan(locks []child, i int) plan {
	if i == 0 {
		return plan{hold: true}
	}
	pred := locks[i-1]
	return plan{watch: pred, last: i == 1, released: pred.kind != kindRead}
}

// readPlan is the plan of a reader at index i of locks.
func readPlan(locks []child, i int) plan {
	j := i - 1
	for j >= 0 && locks[j].kind != kindWrite {
		j--
	}
	if j < 0 {
		return plan{hold: true}
	}
	last := !slices.ContainsFunc(locks[:j], func(c child) bool { return c.kind == kindWrite })
	return plan{watch: locks[j], last: last, released: true}
}
