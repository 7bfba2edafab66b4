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
// it and returns a *driver.HeldError. When the lock is free and the name's
// znode holds nothing else, that is one round trip; otherwise two more (a
// child listing, and the removal), and for a permit got after a listing
// one more (its node is marked, see semaphore.go).
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
// go. When
// ctx ends first, it removes its node and returns ctx's error. A wait cut
// short by the end of the driver's session starts over, at the back of the
// queue, on a new session, and so does one whose session the ensemble
// expired (or may have) before its node was made; a new session that finds
// no server waits for one as long as ctx allows.
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
		// A waiter waits for a server too: a new session (the last one
		// expired behind a partition, say) may find none at first.
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

// newNode resolves an acquisition r, on session s, into its node before
// its creation: every later step reads the node, not r.
func (d *Driver) newNode(s *session, r driver.Request) (*node, error) {
	dir, ok := d.format.dirs[r.Mode]
	if !ok {
		return nil, fmt.Errorf("zklock: %q: mode %v in the %s layout: %w", r.Name, r.Mode, d.format.layout, driver.ErrUnsupported)
	}
	n := &node{s: s, name: r.Name, owner: r.Owner, guid: guidFor(r.Owner), mode: r.Mode,
		parent: d.prefix + dir + r.Name, kind: d.format.kinds[r.Mode]}
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

// create makes n's ephemeral sequential node and reads its token, in one
// round trip: a multi-op creates the node and sets the (empty) data of its
// parent; the parent's new stat carries the transaction's zxid, which is
// the node's czxid, and the parent's child count. alone reports that the
// node holds the lock from its creation: it is the parent's only child
// (of a semaphore's, one of at most limit).
//
// A missing parent is created (as a container, with its own missing
// parents). When the reply is lost with the connection, the node is looked
// for by its guid before another is created.
func (d *Driver) create(n *node) (alone bool, err error) {
	s := n.s
	ops := []any{
		&zk.CreateRequest{Path: d.format.nodePath(n.parent, n.guid, n.kind), Data: n.data, Acl: d.acl, Flags: zk.FlagEphemeralSequential},
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
			n.count = int(res[1].Stat.NumChildren)
			return n.holdsAlone(), nil
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

// find looks for n's node by its guid after a lost creation reply; when
// found it fills in n's path and token.
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
// which the server removes once they are empty: the names of locks no
// longer used do not pile up. (In kazoo's layout they are persistent
// znodes, as kazoo makes them; see format.containers.)
func (d *Driver) makeParents(s *session, p string) error {
	for range 5 {
		var err error
		if e := s.do(func() error {
			if d.format.containers {
				_, err = s.conn.CreateContainer(p, nil, zk.FlagContainer, d.acl)
			} else {
				_, err = s.conn.Create(p, nil, 0, d.acl)
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
