package zklock

import "slices"

// The readers-writer lock is the classic recipe (docs/ZOOKEEPER.md §3):
// nodes _c_<guid>-read#<seq> and _c_<guid>-write#<seq> under
// <prefix>/#rw/<name>, served in sequence order. A writer holds when its
// node is the lowest and watches the node just before its own; a reader
// holds when no write node is lower and watches the nearest lower write
// node. A release sets the node's data as it deletes it (see remove), so a
// data change on a write node means that writer held the lock, and the
// waiter just behind it holds now without listing the children.

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
