package zklock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/dlockgo/dlock/driver"
)

// discardWait bounds how long an abandoned acquisition waits for its node's
// removal before it returns; the removal goes on in the background.
const discardWait = 500 * time.Millisecond

// Unlock implements driver.Driver: it deletes the lock's node. While the
// connection is lost, the delete is retried until it succeeds or the
// session ends (which removes the node too), so a release never leaves a
// node behind to block everyone. When ctx ends first, Unlock returns ctx's
// error and the delete goes on in the background.
func (d *Driver) Unlock(ctx context.Context, r driver.Request) error {
	d.mu.Lock()
	n := d.held[r.Owner]
	if n != nil && n.name == r.Name && n.mode == r.Mode {
		delete(d.held, r.Owner)
		delete(d.byPath, n.path)
	} else {
		n = nil
	}
	d.mu.Unlock()
	if n == nil {
		return fmt.Errorf("%w: %q", driver.ErrNotHeld, r.Name)
	}
	if n.gone.Load() {
		return fmt.Errorf("%w: %q: the lock was lost", driver.ErrNotHeld, r.Name)
	}
	if n.guardTimer != nil {
		n.guardTimer.Stop()
	}
	var existed bool
	err := d.call(ctx, func() (err error) {
		existed, err = d.remove(n, true)
		d.forget(n)
		return err
	})
	switch {
	case ctx.Err() != nil && err == ctx.Err():
		return fmt.Errorf("zklock: release %q (the delete goes on in the background): %w", r.Name, err)
	case errors.Is(err, errSessionEnded):
		return fmt.Errorf("%w: %q: %w", driver.ErrNotHeld, r.Name, err)
	case err != nil:
		return fmt.Errorf("zklock: release %q: %w", r.Name, err)
	case !existed:
		return fmt.Errorf("%w: %q: the lock node was gone", driver.ErrNotHeld, r.Name)
	}
	return nil
}

// Refresh implements driver.Driver. A lock needs no renewal: it lives as
// long as the session, which the ZooKeeper client keeps alive. Refresh
// checks that the lock's node still exists and returns the zero time.
func (d *Driver) Refresh(ctx context.Context, r driver.Request) (time.Time, error) {
	d.mu.Lock()
	n := d.held[r.Owner]
	d.mu.Unlock()
	if n == nil || n.name != r.Name || n.mode != r.Mode {
		return time.Time{}, fmt.Errorf("%w: %q", driver.ErrNotHeld, r.Name)
	}
	var ok bool
	err := d.call(ctx, func() (err error) {
		ok, _, err = n.s.exists(n.path)
		return err
	})
	switch {
	case errors.Is(err, errSessionEnded):
		return time.Time{}, fmt.Errorf("%w: %q: %w", driver.ErrNotHeld, r.Name, err)
	case err != nil:
		return time.Time{}, fmt.Errorf("zklock: refresh %q: %w", r.Name, err)
	case !ok:
		return time.Time{}, fmt.Errorf("%w: %q: the lock node is gone", driver.ErrNotHeld, r.Name)
	}
	return time.Time{}, nil
}

// remove deletes n's node, retrying through connection losses until the
// delete succeeds or the session ends. existed reports that the node was
// there: false when the first reply said it was gone already (a delete
// whose reply was lost and whose retry finds nothing counts as done).
//
// A holder's release (released set) sets the node's data in the same
// transaction as it deletes it: the next waiter's data watch then fires
// NodeDataChanged rather than NodeDeleted, which tells it that its
// predecessor was the holder, so that it holds the lock now without
// listing the children. A waiter giving up just deletes its node.
func (d *Driver) remove(n *node, released bool) (existed bool, err error) {
	lostReply := false
	err = n.s.do(func() (err error) {
		if released && d.format.marks {
			_, err = n.s.conn.Multi(&zk.SetDataRequest{Path: n.path, Version: -1}, &zk.DeleteRequest{Path: n.path, Version: -1})
		} else {
			err = n.s.conn.Delete(n.path, -1)
		}
		lostReply = lostReply || transient(err) && !unsent(err)
		return err
	})
	switch {
	case err == nil:
		d.removeStrays(n)
		return true, nil
	case errors.Is(err, zk.ErrNoNode):
		d.removeStrays(n)
		return lostReply, nil
	case errors.Is(err, errSessionEnded):
		return false, err
	}
	return false, fmt.Errorf("zklock: delete %s: %w", n.path, err)
}

// discard removes the node of an acquisition that gave up (or lost its
// turn). With wait set it waits for the removal up to discardWait; the
// removal goes on in the background either way.
func (d *Driver) discard(n *node, wait bool) {
	if n.path == "" || n.s.ended() {
		return // no node, or gone with its session
	}
	done := make(chan struct{})
	d.bg.Go(func() { // Close waits for it
		defer close(done)
		if _, err := d.remove(n, false); err != nil && !errors.Is(err, errSessionEnded) {
			d.log.Warn("zklock: could not remove an abandoned lock node", "path", n.path, "error", err)
		}
	})
	if !wait {
		return
	}
	t := time.NewTimer(discardWait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

// removeStrays deletes the other nodes with n's guid, which can exist only
// when n was found again after a lost creation reply.
func (d *Driver) removeStrays(n *node) {
	if !n.recovered {
		return
	}
	var names []string
	if err := n.s.do(func() (err error) {
		names, _, err = n.s.conn.Children(n.parent)
		return err
	}); err != nil {
		return
	}
	for _, c := range d.format.children(names) {
		if c.guid == n.guid && n.parent+"/"+c.name != n.path {
			d.removeStray(n.s, n.parent+"/"+c.name)
		}
	}
}

// removeStray deletes a stray node of ours.
func (d *Driver) removeStray(s *session, p string) {
	err := s.do(func() error { return s.conn.Delete(p, -1) })
	if err != nil && !errors.Is(err, zk.ErrNoNode) && !errors.Is(err, errSessionEnded) {
		d.log.Warn("zklock: could not remove a stray lock node", "path", p, "error", err)
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
