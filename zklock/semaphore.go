package zklock

import (
	"context"
	"errors"
	"fmt"

	"github.com/go-zookeeper/zk"
)

// A semaphore of limit permits queues ephemeral sequential nodes, named
// _c_<guid>-permit#<seq>, under the name's znode <prefix>/#sem/<name>. A
// node holds a permit when fewer than limit nodes are lower than it. Since
// sequence numbers only grow, a node's place in the queue only moves
// forward: once it holds a permit it keeps it, and at any instant the
// nodes holding permits are the first limit at most.
//
// A waiter must hear of the departure of any permit holder ahead of it,
// and they leave in any order: watching the node limit places ahead would
// miss a holder that leaves from between. So:
//
//   - the first waiter (index limit) sets a child watch on the name's znode
//     and looks again at every change (a departure, or an arrival behind
//     it, which costs it one listing);
//   - every later waiter watches the node just before its own, with a data
//     watch;
//   - a waiter that gets its permit marks its node (sets its data) before
//     it is granted: that wakes the one waiter watching it, which has just
//     become the first waiter, and which then sets the child watch.
//
// Each change wakes at most one waiter besides the ones it lets in: a
// release wakes the first waiter, which takes the permit and wakes the
// next. A node that got its permit at its creation (the parent had at most
// limit children then) needs no mark: nobody can have seen it waiting. A
// waiter that sets its watch on a node already marked looks again at once.

// permitPlan is the plan of a node at index i of locks in a semaphore of
// limit permits.
func permitPlan(locks []child, i, limit int) plan {
	switch {
	case i < limit:
		return plan{hold: true}
	case i == limit:
		return plan{children: true}
	}
	return plan{watch: locks[i-1], granted: true}
}

// mark sets the data of n's node, which has just got its permit: the
// waiter watching it learns that it must now watch the holders.
func (d *Driver) mark(ctx context.Context, n *node) error {
	err := d.call(ctx, func() error {
		return n.s.do(func() error {
			_, err := n.s.conn.Set(n.path, []byte{1}, -1)
			return err
		})
	})
	switch {
	case errors.Is(err, zk.ErrNoNode):
		return errRequeue // taken away
	case err != nil:
		return fmt.Errorf("zklock: mark %s: %w", n.path, err)
	}
	return nil
}
