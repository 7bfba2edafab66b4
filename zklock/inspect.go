package zklock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/go-zookeeper/zk"

	"github.com/dlockgo/dlock/driver"
)

// Inspect implements driver.Inspector: it lists the mutexes, the
// holders of readers-writer locks (one entry per reader) and the leaders
// of elections whose names start with prefix, sorted by name, then mode,
// then token. Semaphores are not listed: which of their nodes hold a
// permit depends on the semaphore's limit, which the tree does not record.
//
// It first brings the server it is connected to up to date with every
// write committed before the call, by any client (see sync), then walks
// the znodes under the driver's prefix that can hold names starting with
// prefix: one child listing per znode, and one read per holder, whose node
// gives the token (its czxid, as in the holder's grant) and the owner (the
// guid in the node's name, which is dlock's owner value; the owner itself
// for a lock this Driver holds). Waiters are the other lock nodes queued
// under the name. Locks live as long as their holder's session, so Expires
// is zero. The walk is a snapshot: locks taken or released meanwhile may
// be missed or reported gone.
func (d *Driver) Inspect(ctx context.Context, prefix string) ([]driver.LockInfo, error) {
	s, err := d.ready(ctx)
	if err != nil {
		return nil, err
	}
	w := &walk{d: d, s: s, ctx: ctx, prefix: prefix, owners: d.ownersByPath()}
	if err := d.sync(s, d.prefix); err != nil {
		return nil, err
	}
	for _, tree := range []struct {
		dir  string
		kind driver.Mode // Exclusive, Read (a readers-writer lock) or Leader
	}{
		{d.prefix, driver.Exclusive},
		{d.prefix + rwDir[:len(rwDir)-1], driver.Read},
		{d.prefix + electDir[:len(electDir)-1], driver.Leader},
	} {
		if err := w.dir(tree.dir, "", tree.kind); err != nil {
			return nil, fmt.Errorf("zklock: inspect: %w", err)
		}
	}
	slices.SortFunc(w.out, func(a, b driver.LockInfo) int {
		return cmp.Or(strings.Compare(a.Name, b.Name), cmp.Compare(a.Mode, b.Mode), cmp.Compare(a.Token, b.Token))
	})
	return w.out, nil
}

// ownersByPath returns the owners of the locks this driver holds, by the
// path of their node.
func (d *Driver) ownersByPath() map[string]string {
	d.mu.Lock()
	defer d.mu.Unlock()
	m := make(map[string]string, len(d.held))
	for owner, n := range d.held {
		m[n.path] = owner
	}
	return m
}

// walk is one Inspect's traversal of the tree.
type walk struct {
	d      *Driver
	s      *session
	ctx    context.Context
	prefix string
	owners map[string]string // by node path
	out    []driver.LockInfo
}

// dir lists the znode dir, which holds the lock called name (none at the
// root of a kind's tree, where name is ""), records its holders if name
// starts with the prefix, and descends into the znodes of longer names
// that can start with it.
func (w *walk) dir(dir, name string, kind driver.Mode) error {
	if err := w.ctx.Err(); err != nil {
		return err
	}
	var names []string
	err := w.s.do(func() (err error) {
		names, _, err = w.s.conn.Children(dir)
		return err
	})
	if errors.Is(err, zk.ErrNoNode) {
		return nil // gone since its parent was listed, or never made
	}
	if err != nil {
		return fmt.Errorf("list %s: %w", dir, err)
	}
	if name != "" && strings.HasPrefix(name, w.prefix) {
		if err := w.holders(dir, name, kind, lockChildren(names)); err != nil {
			return err
		}
	}
	for _, c := range names {
		// Lock nodes and the trees of the other kinds hold a '#', which no
		// segment of a name does.
		if strings.Contains(c, "#") {
			continue
		}
		sub := c
		if name != "" {
			sub = name + "/" + c
		}
		if strings.HasPrefix(sub+"/", w.prefix) || strings.HasPrefix(w.prefix, sub+"/") {
			if err := w.dir(dir+"/"+c, sub, kind); err != nil {
				return err
			}
		}
	}
	return nil
}

// holders records the holders of the lock called name, whose lock nodes
// under dir are locks, in queue order.
func (w *walk) holders(dir, name string, kind driver.Mode, locks []child) error {
	if len(locks) == 0 {
		return nil
	}
	held := 1
	if kind == driver.Read && locks[0].kind == kindRead {
		// Readers hold together up to the first writer.
		for held < len(locks) && locks[held].kind == kindRead {
			held++
		}
	}
	for _, c := range locks[:held] {
		p := dir + "/" + c.name
		var (
			st *zk.Stat
			ok bool
		)
		err := w.s.do(func() (err error) {
			ok, st, err = w.s.conn.Exists(p)
			return err
		})
		if err != nil {
			return fmt.Errorf("read %s: %w", p, err)
		}
		if !ok {
			continue // released since the listing
		}
		info := driver.LockInfo{Name: name, Mode: kind, Token: uint64(st.Czxid), Owner: c.guid, Waiters: len(locks) - held}
		if c.kind == kindWrite {
			info.Mode = driver.Write
		}
		if o, ok := w.owners[p]; ok {
			info.Owner = o
		}
		w.out = append(w.out, info)
	}
	return nil
}

var _ driver.Inspector = (*Driver)(nil)
