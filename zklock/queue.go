package zklock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/dlockgo/dlock/driver"
)

// queue finds n's place among the parent's lock nodes, in every mode: n's
// plan tells whether it holds the lock, and if not which single node it
// waits for (or, for the first waiter of a semaphore, any change of the
// children). TryLock gives up where Lock would wait.
func (d *Driver) queue(ctx context.Context, n *node, wait bool) (driver.Grant, error) {
	var own <-chan zk.Event // n's node watch, set before waiting
	for {
		locks, _, err := d.list(ctx, n, false)
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
			return d.grantQueued(ctx, n)
		}
		if !wait {
			d.discard(n, true)
			return driver.Grant{}, &driver.HeldError{Name: n.name}
		}
		if own == nil {
			if _, own, err = d.watchCtx(ctx, n.s, n.path); err != nil {
				d.discard(n, true)
				if errors.Is(err, zk.ErrNoNode) {
					err = errRequeue // taken away
				}
				return driver.Grant{}, err
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
			return d.grantQueued(ctx, n)
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
	st, ev, err := d.watchCtx(ctx, n.s, n.parent+"/"+p.watch.name)
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
		locks, ev, err := d.list(ctx, n, true)
		if err != nil {
			return false, err
		}
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

// grantQueued grants n after its listing or its wait said it holds the
// lock. A permit holder first marks its node (see semaphore.go), telling
// the waiter behind it to look again; the mark's own notification comes
// before its reply, so before grant records n: it does not end the lock
// (see nodeEvent).
func (d *Driver) grantQueued(ctx context.Context, n *node) (driver.Grant, error) {
	if n.mode == driver.Permit {
		if err := d.mark(ctx, n); err != nil {
			d.discard(n, true)
			return driver.Grant{}, err
		}
	}
	return d.grant(n), nil
}

// listed counts a child listing in the test hooks.
func (d *Driver) listed() {
	if h := d.hooks(); h != nil {
		h.listings.Add(1)
	}
}

// await waits, counted in the test hooks, for the watch event ev. It
// returns errRequeue when the session is ending (the watch reports it, or
// n.s ends) or n's own node went (own), ctx's error when ctx ends first.
func (d *Driver) await(ctx context.Context, n *node, ev, own <-chan zk.Event) (zk.Event, error) {
	h := d.hooks()
	if h != nil {
		h.waiting.Add(1)
		defer h.waiting.Add(-1)
	}
	select {
	case e := <-ev:
		if h != nil {
			h.wakeups.Add(1)
		}
		if e.Type == zk.EventNotWatching {
			return e, errRequeue
		}
		return e, nil
	case <-own:
		return zk.Event{}, errRequeue
	case <-n.s.done:
		return zk.Event{}, errRequeue
	case <-ctx.Done():
		return zk.Event{}, ctx.Err()
	}
}

// settle decides a wait whose predecessor went: granted when it was first
// in line, unless n's own node went too. Notifications come in order: had
// n's node gone before its predecessor, its watch would hold the news.
func settle(head bool, own <-chan zk.Event) (granted bool, err error) {
	select {
	case <-own:
		return false, errRequeue
	default:
		return head, nil
	}
}

// list returns the lock nodes of n's parent, in queue order, and with
// watch set a child watch on the parent.
func (d *Driver) list(ctx context.Context, n *node, watch bool) ([]child, <-chan zk.Event, error) {
	d.listed()
	var r struct { // one allocation for what the call's closure sets
		names []string
		ev    <-chan zk.Event
	}
	err := d.call(ctx, func() error {
		return n.s.do(func() (err error) {
			if watch {
				r.names, _, r.ev, err = n.s.conn.ChildrenW(n.parent)
			} else {
				r.names, _, err = n.s.conn.Children(n.parent)
			}
			return err
		})
	})
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil, nil // the parent is gone, and n's node with it
	}
	if err != nil {
		return nil, nil, fmt.Errorf("zklock: list %s: %w", n.parent, err)
	}
	return d.format.queueOf(r.names, n.mode), r.ev, nil
}

// watchCtx sets a data watch on p (a node that is gone gets none: unlike
// an exists watch, it leaves nothing behind on the server). What the call
// sets is read only once it returned: when ctx ends first, it goes on.
func (d *Driver) watchCtx(ctx context.Context, s *session, p string) (*zk.Stat, <-chan zk.Event, error) {
	var w struct { // one allocation for what the call's closure sets
		st *zk.Stat
		ev <-chan zk.Event
	}
	err := d.call(ctx, func() error {
		return s.do(func() (err error) {
			_, w.st, w.ev, err = s.conn.GetW(p)
			return err
		})
	})
	if err != nil {
		return nil, nil, err
	}
	return w.st, w.ev, nil
}

// grant records n as held, and arms the timer that watches its node for
// loss (a watch the wait set on it may have fired before n was recorded).
func (d *Driver) grant(n *node) driver.Grant {
	d.mu.Lock()
	d.held[n.owner] = n
	d.byPath[n.path] = n
	d.mu.Unlock()
	if n.s.ended() {
		d.forget(n) // the session's end may have missed it
	} else {
		n.guardTimer = time.AfterFunc(guardDelay, func() {
			done := d.bg.Add()
			defer done()
			d.guard(n)
		})
	}
	// Every kind of lock lives exactly as long as its session may (see
	// confirmedAt).
	return driver.Grant{Token: n.token, OnLost: n.notice.Set, Check: n.s.checkFn}
}

// guardDelay is how long after a grant the driver sets the watch on its
// node, as most briefly held locks are released before: until then, a
// deletion of the node behind the holder's back is noticed that much later
// (the end of the session at once regardless).
const guardDelay = 25 * time.Millisecond

// loseSession ends the locks of a session that ended.
func (d *Driver) loseSession(s *session) {
	var gone []*node
	d.mu.Lock()
	for owner, n := range d.held {
		if n.s == s {
			delete(d.held, owner)
			delete(d.byPath, n.path)
			gone = append(gone, n)
		}
	}
	d.mu.Unlock()
	for _, n := range gone {
		n.lose()
	}
}

// guard sets a watch on n's node, whose deletion behind the holder's back
// then reaches nodeEvent (through the session's event callback, not a
// goroutine of the lock's); a node already gone ends the lock at once.
func (d *Driver) guard(n *node) {
	if n.gone.Load() {
		return
	}
	if _, _, err := d.watchCtx(context.Background(), n.s, n.path); errors.Is(err, zk.ErrNoNode) {
		d.forget(n)
	}
}

// nodeEvent ends the held lock whose node an event is about: the node was
// deleted, or its data changed, which only a release does (in the
// transaction that deletes it). It runs on the zk.Conn's reader, so the
// loss is signalled on a goroutine of its own.
func (d *Driver) nodeEvent(path string) {
	d.mu.Lock()
	n := d.byPath[path]
	d.mu.Unlock()
	if n != nil {
		d.bg.Go(func() { d.forget(n) })
	}
}
