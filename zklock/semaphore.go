package zklock

import (
	"context"
	"errors"
	"fmt"

	"github.com/go-zookeeper/zk"
)

// A semaphore queues nodes _c_<guid>-permit#<seq> under
// <prefix>/#sem/<name>; a node holds a permit when fewer than limit nodes
// are lower (docs/ZOOKEEPER.md §3 has the reasoning and the costs).
// Holders leave in any order, so the first waiter (index limit) sets a
// child watch on the name's znode, every later waiter a data watch on the
// node just before its own, and a waiter that gets its permit after a
// listing marks its node (sets its data) to wake the one waiter behind it,
// now first. A node that held from its creation needs no mark (nobody saw
// it wait); a watch set on a node already marked looks again at once.

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
