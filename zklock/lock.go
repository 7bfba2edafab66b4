package zklock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"path"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/dlockgo/dlock/driver"
)

// errRequeue makes Lock start over: the session ended or the waiter's node
// vanished while it waited.
var errRequeue = errors.New("zklock: requeue")

// sessionLost reports whether err is the end of a session the ensemble
// expired, or may have (no contact the leader confirmed): a waiter starts
// over on a new session. Other ends (authentication refused, the driver
// closed) are final.
func sessionLost(err error) bool { return errors.Is(err, errExpired) || errors.Is(err, errNoContact) }

// TryLock implements driver.Driver, in every mode: it queues a node and,
// unless the node holds the lock at once (first in line; for a reader, no
// writer before it; for a permit, fewer than the limit before it), removes
// it and returns a *driver.HeldError. That is one round trip when the lock
// is free and the name's znode holds nothing else; otherwise two more (a
// child listing, the removal), and one more for a permit got after a
// listing (its node is marked, see semaphore.go).
func (d *Driver) TryLock(ctx context.Context, r driver.Request) (driver.Grant, error) {
	g, err := d.acquire(ctx, r, false)
	if errors.Is(err, errRequeue) {
		err = fmt.Errorf("zklock: %q: the lock node vanished before it could be checked: %w", r.Name, err)
	}
	return g, err
}

// Lock implements driver.Waiter, in every mode: it queues a node behind
// the holders and earlier waiters and waits for the one node that stands
// in its way (the node just before its own, for a mutex or an election) to
// go. When ctx ends first, it removes its node and returns ctx's error. A
// wait cut short by the end of the driver's session starts over, at the
// back of the queue, on a new session, and so does one whose session the
// ensemble expired (or may have) before its node was made; a new session
// that finds no server waits for one as long as ctx allows.
func (d *Driver) Lock(ctx context.Context, r driver.Request) (driver.Grant, error) {
	for {
		g, err := d.acquire(ctx, r, true)
		if (errors.Is(err, errRequeue) || sessionLost(err)) && ctx.Err() == nil {
			continue
		}
		if errors.Is(err, errRequeue) {
			err = ctx.Err()
		}
		return g, err
	}
}

// acquire creates the request's node and, if it is not alone, checks its
// place in the queue and, when wait is set, waits for its turn.
func (d *Driver) acquire(ctx context.Context, r driver.Request, wait bool) (driver.Grant, error) {
	s, err := d.ready(ctx)
	if err != nil {
		return driver.Grant{}, err
	}
	if wait {
		if err := s.handshake(ctx); err != nil {
			return driver.Grant{}, err
		}
	}
	n, err := d.newNode(s, r)
	if err != nil {
		return driver.Grant{}, err
	}
	alone, err := d.createCtx(ctx, n)
	if err != nil {
		return driver.Grant{}, err
	}
	if alone {
		return d.grant(n), nil
	}
	return d.queue(ctx, n, wait)
}

// newNode resolves r, on session s, into its node before its creation:
// every later step reads the node, not r.
func (d *Driver) newNode(s *session, r driver.Request) (*node, error) {
	dir, ok := d.format.dirs[r.Mode]
	if !ok {
		return nil, fmt.Errorf("zklock: %q: mode %v in the %s layout: %w", r.Name, r.Mode, d.format.layout, driver.ErrUnsupported)
	}
	n := &node{s: s, name: r.Name, owner: r.Owner, guid: guidFor(r.Owner), mode: r.Mode,
		parent: d.opt.Prefix + dir + r.Name, kind: d.format.kinds[r.Mode]}
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

// guidFor returns the guid of an acquisition: the owner value when it is 32
// lower-case hex digits, else a random one.
func guidFor(owner string) string {
	if len(owner) == guidLen && strings.Trim(owner, "0123456789abcdef") == "" {
		return owner
	}
	var b [guidLen / 2]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails since Go 1.24
	return hex.EncodeToString(b[:])
}

// createCtx is create, bounded by ctx: when ctx ends first, the node the
// create goes on to make is removed in the background.
func (d *Driver) createCtx(ctx context.Context, n *node) (alone bool, err error) {
	if ctx.Done() == nil {
		return d.create(n)
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}
	type result struct {
		alone bool
		err   error
	}
	res := make(chan result, 1)
	d.bg.Go(func() {
		alone, err := d.create(n)
		res <- result{alone, err}
	})
	select {
	case r := <-res:
		return r.alone, r.err
	case <-ctx.Done():
		d.bg.Go(func() {
			if r := <-res; r.err == nil {
				d.discard(n, false)
			}
		})
		return false, ctx.Err()
	}
}

// create makes n's ephemeral sequential node and reads its token in one
// round trip: a multi-op that also sets the parent's (empty) data, whose
// new stat carries the transaction's zxid (the node's czxid) and the
// parent's child count. alone reports that the node holds the lock from
// its creation: it is the parent's only child (of a semaphore's, one of at
// most limit); the count includes longer names' containers, so it errs
// only towards looking further. A missing parent is created (a container,
// with its missing parents); after a reply lost with the connection, the
// node is looked for by its guid before another is created.
func (d *Driver) create(n *node) (alone bool, err error) {
	s := n.s
	ops := []any{
		&zk.CreateRequest{Path: d.format.nodePath(n.parent, n.guid, n.kind), Data: n.data, Acl: d.opt.ACL, Flags: zk.FlagEphemeralSequential},
		&zk.SetDataRequest{Path: n.parent, Version: -1},
	}
	pause := 2 * time.Millisecond
	for parents, lostReply := 0, false; ; {
		if lostReply {
			found, err := d.find(n)
			if err != nil || found {
				return false, err
			}
			lostReply = false
		}
		res, err := s.conn.Multi(ops...)
		switch {
		case err == nil && len(res) == 2 && res[1].Stat != nil:
			n.path = res[0].String
			n.token = uint64(res[1].Stat.Mzxid)
			if c, ok := d.format.parse(n.base()); ok {
				n.seq = c.seq
			}
			if n.mode == driver.Permit {
				return int(res[1].Stat.NumChildren) <= n.limit, nil
			}
			return res[1].Stat.NumChildren == 1, nil
		case err == nil:
			return false, fmt.Errorf("zklock: create in %s: unexpected multi reply %+v", n.parent, res)
		case errors.Is(err, zk.ErrNoNode) && parents < 5:
			// Retried a few times: a container the server removes as
			// empty between our creating it and using it is recreated.
			parents++
			if err := d.makeParents(s, n.parent); err != nil {
				return false, err
			}
		case s.ended() || errors.Is(err, zk.ErrSessionExpired) || errors.Is(err, zk.ErrClosing):
			<-s.waitEnd(err)
			return false, s.endErr
		case transient(err) && s.isEstablished():
			// The request may have been applied, unless it was never sent.
			lostReply = !unsent(err)
			if !s.sleep(pause) {
				return false, s.endErr
			}
			pause = min(2*pause, 100*time.Millisecond)
		default:
			return false, fmt.Errorf("zklock: create lock node in %s: %w", n.parent, err)
		}
	}
}

// find looks for n's node by its guid after a lost creation reply, and
// fills in n's path and token when found.
func (d *Driver) find(n *node) (bool, error) {
	names, err := n.s.listChildren(n.parent)
	if errors.Is(err, zk.ErrNoNode) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	for _, c := range d.format.children(names) {
		if c.guid != n.guid {
			continue
		}
		p := n.parent + "/" + c.name
		ok, st, err := n.s.exists(p)
		if err != nil {
			return false, err
		}
		if !ok {
			continue
		}
		n.path, n.seq, n.token, n.recovered = p, c.seq, uint64(st.Czxid), true
		return true, nil
	}
	return false, nil
}

// makeParents creates p and its missing ancestors as container znodes,
// which the server removes once empty, so that unused names do not pile
// up (persistent znodes in kazoo's layout: see format.containers).
func (d *Driver) makeParents(s *session, p string) error {
	for range 5 {
		var err error
		if e := s.do(func() error {
			if d.format.containers {
				_, err = s.conn.CreateContainer(p, nil, zk.FlagContainer, d.opt.ACL)
			} else {
				_, err = s.conn.Create(p, nil, 0, d.opt.ACL)
			}
			if transient(err) {
				return err
			}
			return nil
		}); e != nil {
			return e
		}
		switch {
		case err == nil, errors.Is(err, zk.ErrNodeExists):
			return nil
		case errors.Is(err, zk.ErrNoNode) && path.Dir(p) != "/":
			if err := d.makeParents(s, path.Dir(p)); err != nil {
				return err
			}
		default:
			return fmt.Errorf("zklock: create %s: %w", p, err)
		}
	}
	return fmt.Errorf("zklock: create %s: its parent keeps disappearing", p)
}

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

// Renew implements driver.Driver. A lock needs no renewal: it lives as
// long as the session, which the ZooKeeper client keeps alive. Renew
// checks that the lock's node still exists and returns the zero time.
func (d *Driver) Renew(ctx context.Context, r driver.Request) (time.Time, error) {
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
		return time.Time{}, fmt.Errorf("zklock: renew %q: %w", r.Name, err)
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
			d.opt.Logger.Warn("zklock: could not remove an abandoned lock node", "path", n.path, "error", err)
		}
	})
	if wait {
		select {
		case <-done:
		case <-time.After(discardWait):
		}
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
		d.opt.Logger.Warn("zklock: could not remove a stray lock node", "path", p, "error", err)
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
