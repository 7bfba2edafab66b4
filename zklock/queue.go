package zklock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/dlockgo/dlock/driver"
)

// queue finds n's place among the parent's lock nodes. First in line, it
// holds the lock. Otherwise TryLock gives up, and Lock watches the node just
// before its own and waits.
func (d *Driver) queue(ctx context.Context, n *node, wait bool) (driver.Grant, error) {
	var own <-chan zk.Event // n's node watch, set before waiting
	for {
		locks, err := d.list(ctx, n)
		if err != nil {
			d.discard(n, true)
			return driver.Grant{}, err
		}
		i := -1
		for j, c := range locks {
			switch {
			case c.name == n.base():
				i = j
			case c.guid == n.guid && n.recovered:
				// A second node of ours, from a create whose lost reply
				// was applied after all.
				d.removeStray(n.s, n.parent+"/"+c.name)
			}
		}
		if i < 0 {
			d.discard(n, false)
			return driver.Grant{}, errRequeue // taken away while queued
		}
		if i == 0 {
			return d.grant(n), nil
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
		granted, err := d.wait(ctx, n, n.parent+"/"+locks[i-1].name, i == 1, own)
		if err != nil {
			d.discard(n, true)
			return driver.Grant{}, err
		}
		if granted {
			return d.grant(n), nil
		}
	}
}

// wait waits for the node pred, just before n's, to go. When pred was first
// in line (n's listing said so, or pred's data changed, which only a
// holder's release does), n is now first: no other node can have slipped in
// before it, since sequence numbers only grow, so n holds the lock without
// listing the children again (granted). Otherwise (a waiter before n gave
// up, or an operator deleted pred) n must look again.
func (d *Driver) wait(ctx context.Context, n *node, pred string, head bool, own <-chan zk.Event) (granted bool, err error) {
	for {
		ev, err := d.watchCtx(ctx, n.s, pred)
		if errors.Is(err, zk.ErrNoNode) {
			return settle(head, own)
		}
		if err != nil {
			return false, err
		}
		e, err := d.await(ctx, n, ev, own)
		if err != nil {
			return false, err
		}
		switch e.Type {
		case zk.EventNodeDeleted:
			return settle(head, own)
		case zk.EventNodeDataChanged:
			// In dlock's layout only a holder's release sets a lock node's
			// data, in the transaction that deletes it: pred was first in
			// line. In a peer's, the data says nothing: watch again.
			if d.format.marks {
				return settle(true, own)
			}
		}
	}
}

// await waits, counted in d.waiting, for the watch event ev. It returns
// errRequeue when the session is ending (the watch reports it, or n.s
// ends) or n's own node went (own), and ctx's error when ctx ends first.
func (d *Driver) await(ctx context.Context, n *node, ev, own <-chan zk.Event) (zk.Event, error) {
	d.waiting.Add(1)
	defer d.waiting.Add(-1)
	select {
	case e := <-ev:
		d.wakeups.Add(1)
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

// list returns the lock nodes of n's parent, in queue order.
func (d *Driver) list(ctx context.Context, n *node) ([]child, error) {
	d.listings.Add(1)
	var names []string
	err := d.call(ctx, func() error {
		return n.s.do(func() (err error) {
			names, _, err = n.s.conn.Children(n.parent)
			return err
		})
	})
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil // the parent is gone, and n's node with it
	}
	if err != nil {
		return nil, fmt.Errorf("zklock: list %s: %w", n.parent, err)
	}
	return d.format.queueOf(names, n.mode), nil
}

// watchCtx sets a data watch on p (a node that is gone gets none: unlike
// an exists watch, it leaves nothing behind on the server).
func (d *Driver) watchCtx(ctx context.Context, s *session, p string) (<-chan zk.Event, error) {
	var ev <-chan zk.Event
	err := d.call(ctx, func() error {
		return s.do(func() (err error) {
			_, _, ev, err = s.conn.GetW(p)
			return err
		})
	})
	return ev, err
}

// requeueIfGone turns "n's node is gone" into errRequeue.
func requeueIfGone(err error) error {
	if errors.Is(err, zk.ErrNoNode) {
		return errRequeue
	}
	return err
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
		// Most locks held briefly are released before the watch would be
		// set: set it only if the lock is still held after guardDelay.
		n.guardTimer = time.AfterFunc(guardDelay, func() {
			done := d.bg.Add()
			defer done()
			d.guard(n)
		})
	}
	// Every kind of lock is granted here, with its session's Check: the lock
	// lives exactly as long as the session may (see session.confirmedAt).
	return driver.Grant{Token: n.token, OnLost: n.notice.Set, Check: n.s.checkFn}
}

// guardDelay is how long after a grant without a watch on its node (an
// uncontended one) the driver sets that watch. Until then, a deletion of
// the node behind the holder's back (by an operator) is noticed that much
// later; the end of the session is noticed at once regardless.
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

// guard sets a watch on n's node, so that its deletion behind the
// holder's back reaches nodeEvent; a node already gone ends the lock at
// once. No goroutine waits on the watch: the session's event callback
// receives it.
func (d *Driver) guard(n *node) {
	if n.gone.Load() {
		return
	}
	if _, err := d.watchCtx(context.Background(), n.s, n.path); errors.Is(err, zk.ErrNoNode) {
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

// forget drops n from the held locks and ends it.
func (d *Driver) forget(n *node) {
	d.mu.Lock()
	if d.held[n.owner] == n {
		delete(d.held, n.owner)
	}
	if d.byPath[n.path] == n {
		delete(d.byPath, n.path)
	}
	d.mu.Unlock()
	n.lose()
}
