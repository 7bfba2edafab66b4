package zklock

import (
	"context"
	"errors"
	"fmt"

	"github.com/go-zookeeper/zk"

	"github.com/dlockgo/dlock/driver"
)

// Each kind of lock keeps its names under a znode of its own, below the
// prefix: the mutex "x" is <prefix>/x, the readers-writer lock "x"
// <prefix>/#rw/x, the semaphore "x" <prefix>/#sem/x and the election "x"
// <prefix>/#elect/x. No lock name can contain a '#', so these never meet
// a mutex's znode.
const (
	rwDir    = "/#rw/"
	semDir   = "/#sem/"
	electDir = "/#elect/"
)

// Supports implements driver.Moder: the ZooKeeper driver does every mode
// (mutex, readers-writer lock, semaphore and election) in dlock's own
// layout, and every mode but the semaphore in Curator's and kazoo's.
func (d *Driver) Supports(m driver.Mode) bool {
	return d.format.supports(m)
}

// UnsupportedReason says why the driver lacks mode m ("" when it has it):
// dlock adds it to the error of a request for that mode.
func (d *Driver) UnsupportedReason(m driver.Mode) string {
	if d.format.supports(m) {
		return ""
	}
	if m == driver.Permit {
		return fmt.Sprintf("the %s layout has no semaphore: the peer's semaphore recipe counts leases under a second lock, a format dlock does not share", d.format.layout)
	}
	return fmt.Sprintf("the %s layout has no %v", d.format.layout, m)
}

var _ driver.Unsupporter = (*Driver)(nil)

// dir returns the znode of the lock called name in mode m.
func (d *Driver) dir(m driver.Mode, name string) string { return d.prefix + d.format.dirs[m] + name }

// newNode returns the node of an acquisition r, on session s, before its
// creation.
func (d *Driver) newNode(s *session, r driver.Request) (*node, error) {
	if !d.format.supports(r.Mode) {
		return nil, fmt.Errorf("zklock: %q: mode %v in the %s layout: %w", r.Name, r.Mode, d.format.layout, driver.ErrUnsupported)
	}
	n := &node{s: s, name: r.Name, owner: r.Owner, guid: guidFor(r.Owner), mode: r.Mode}
	n.parent, n.kind = d.dir(r.Mode, r.Name), d.format.kinds[r.Mode]
	switch r.Mode {
	case driver.Permit:
		if r.Limit < 1 {
			return nil, fmt.Errorf("zklock: semaphore %q: limit %d, want at least 1", r.Name, r.Limit)
		}
		n.limit = r.Limit
	case driver.Leader:
		n.data = []byte(r.Value)
	}
	return n, nil
}

// holdsAlone reports whether n holds its lock from its creation, judged by
// the number of its parent's children just after: alone, or for a
// semaphore among at most limit. The count includes the containers of
// longer names, so it can only err on the side of looking further.
func (n *node) holdsAlone() bool {
	if n.mode == driver.Permit {
		return n.count <= n.limit
	}
	return n.count == 1
}

// A plan is what a node must do, given its place in a listing of its
// parent's lock nodes.
type plan struct {
	hold bool // n holds the lock now

	// watch is the node to wait for (a data watch), or, with children
	// set, none: wait for any change among the parent's children.
	watch    child
	children bool

	// last: once watch goes, for whatever reason, n holds the lock
	// (nothing else stands before it, and nothing can get in front).
	// released: when watch's data changes (the release of a holder), n
	// holds the lock.
	last, released bool

	// granted: watch's data having been set at all means it holds its
	// permit now, and n must look again (semaphores).
	granted bool
}

// planFor returns n's plan when it is at index i of locks.
func (n *node) planFor(locks []child, i int) plan {
	switch n.mode {
	case driver.Read:
		return readPlan(locks, i)
	case driver.Write:
		return writePlan(locks, i)
	case driver.Permit:
		return permitPlan(locks, i, n.limit)
	}
	panic("zklock: no plan for mode " + n.mode.String())
}

// queueShared is queue for the kinds of lock whose holders can be more
// than one (readers, permits): n's plan tells whether it holds, and if not
// which single node it waits for. TryLock gives up where Lock would wait.
func (d *Driver) queueShared(ctx context.Context, n *node, wait bool) (driver.Grant, error) {
	var own <-chan zk.Event // n's node watch, set before waiting
	for {
		locks, err := d.list(ctx, n)
		if err != nil {
			d.discard(n, true)
			return driver.Grant{}, err
		}
		i := d.place(n, locks)
		if i < 0 {
			d.discard(n, false)
			return driver.Grant{}, errRequeue // taken away while queued
		}
		p := n.planFor(locks, i)
		if p.hold {
			return d.grantShared(ctx, n)
		}
		if !wait {
			d.discard(n, true)
			return driver.Grant{}, &driver.HeldError{Name: n.name}
		}
		if own == nil {
			if own, err = d.watchCtx(ctx, n.s, n.path); err != nil {
				d.discard(n, true)
				return driver.Grant{}, requeueIfGone(err)
			}
		}
		var granted bool
		if p.children {
			granted, err = d.waitChildren(ctx, n, own)
		} else {
			granted, err = d.waitNode(ctx, n, p, own)
		}
		if err != nil {
			d.discard(n, true)
			return driver.Grant{}, err
		}
		if granted {
			return d.grantShared(ctx, n)
		}
	}
}

// place returns n's index in locks, or -1 when its node is not there. It
// removes the second node of a recovered creation on the way.
func (d *Driver) place(n *node, locks []child) int {
	i := -1
	for j, c := range locks {
		switch {
		case c.name == n.base():
			i = j
		case c.guid == n.guid && n.recovered:
			d.removeStray(n.s, n.parent+"/"+c.name)
		}
	}
	return i
}

// waitNode waits for the node p.watch to go or change. granted reports
// that n holds the lock now (by p.last or p.released); otherwise n must
// look at the children again.
func (d *Driver) waitNode(ctx context.Context, n *node, p plan, own <-chan zk.Event) (granted bool, err error) {
	var (
		ev <-chan zk.Event
		st *zk.Stat
	)
	err = d.call(ctx, func() error {
		return n.s.do(func() (err error) {
			_, st, ev, err = n.s.conn.GetW(n.parent + "/" + p.watch.name)
			return err
		})
	})
	switch {
	case errors.Is(err, zk.ErrNoNode):
		return settle(p.last, own)
	case err != nil:
		return false, err
	case p.granted && st.Version > 0:
		return false, nil // it got its permit before the watch was set
	}
	e, err := d.await(ctx, n, ev, own)
	if err != nil {
		return false, err
	}
	switch e.Type {
	case zk.EventNodeDeleted:
		return settle(p.last, own)
	case zk.EventNodeDataChanged:
		return settle(p.last || p.released && d.format.marks, own)
	}
	return false, nil
}

// waitChildren waits, with a child watch on n's parent, until n's plan
// says it holds the lock (granted), or says to wait for a single node
// (then n looks again).
func (d *Driver) waitChildren(ctx context.Context, n *node, own <-chan zk.Event) (granted bool, err error) {
	for {
		var (
			names []string
			ev    <-chan zk.Event
		)
		d.listings.Add(1)
		err := d.call(ctx, func() error {
			return n.s.do(func() (err error) {
				names, _, ev, err = n.s.conn.ChildrenW(n.parent)
				return err
			})
		})
		if errors.Is(err, zk.ErrNoNode) {
			return false, errRequeue // the parent is gone, and n's node with it
		}
		if err != nil {
			return false, fmt.Errorf("zklock: list %s: %w", n.parent, err)
		}
		locks := d.format.queueOf(names, n.mode)
		i := d.place(n, locks)
		if i < 0 {
			return false, errRequeue
		}
		p := n.planFor(locks, i)
		if p.hold {
			return true, nil
		}
		if !p.children {
			return false, nil
		}
		if _, err := d.await(ctx, n, ev, own); err != nil {
			return false, err
		}
	}
}

// grantShared grants n after its listing or its wait said it holds the
// lock. A permit holder first marks its node (see semaphore.go), which
// tells the waiter behind it to look again. The mark's own notification
// comes before its reply, so before grant records n: it does not end the
// lock (see nodeEvent).
func (d *Driver) grantShared(ctx context.Context, n *node) (driver.Grant, error) {
	if n.mode == driver.Permit {
		if err := d.mark(ctx, n); err != nil {
			d.discard(n, true)
			return driver.Grant{}, err
		}
	}
	return d.grant(n), nil
}
