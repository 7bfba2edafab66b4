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

// Inspect implements driver.Inspector: it lists the mutexes, the holders
// of readers-writer locks (one entry per reader) and the leaders of
// elections whose names start with prefix, sorted by name, then mode, then
// token; semaphores are not listed. It first syncs the server with every
// write committed before the call. Owner is the guid in the node's name
// (the owner itself for a lock this Driver holds), Waiters the other lock
// nodes queued, Expires zero. The walk is a snapshot: locks taken or
// released meanwhile may be missed or reported gone. See docs/CLI.md,
// dlock status.
func (d *Driver) Inspect(ctx context.Context, prefix string) ([]driver.LockInfo, error) {
	s, err := d.ready(ctx)
	if err != nil {
		return nil, err
	}
	w := &walk{d: d, s: s, ctx: ctx, prefix: prefix, owners: d.ownersByPath()}
	if err := d.sync(s, d.opt.Prefix); err != nil {
		return nil, err
	}
	type tree struct {
		dir  string
		kind driver.Mode // Exclusive, Read (a readers-writer lock) or Leader
	}
	trees := []tree{
		{d.opt.Prefix, driver.Exclusive},
		{d.opt.Prefix + rwDir[:len(rwDir)-1], driver.Read},
		{d.opt.Prefix + electDir[:len(electDir)-1], driver.Leader},
	}
	if d.format != dlockFormat {
		trees = trees[:1] // a peer's kinds share the names' znodes
	}
	for _, tree := range trees {
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

// dir lists the znode dir, which holds the lock called name ("" at the
// root of a kind's tree), records its holders if name starts with the
// prefix, and descends into the znodes of longer names that can.
func (w *walk) dir(dir, name string, kind driver.Mode) error {
	if err := w.ctx.Err(); err != nil {
		return err
	}
	names, err := w.s.listChildren(dir)
	if errors.Is(err, zk.ErrNoNode) {
		return nil // gone since its parent was listed, or never made
	}
	if err != nil {
		return fmt.Errorf("list %s: %w", dir, err)
	}
	if name != "" && strings.HasPrefix(name, w.prefix) {
		for _, q := range w.d.queues(names, kind) {
			if err := w.holders(dir, name, q.mode, q.locks); err != nil {
				return err
			}
		}
	}
	for _, c := range names {
		// Skip the lock nodes (and in dlock's layout the trees of the
		// other kinds, which hold a '#' as lock nodes do).
		if w.d.format.isLockNode(c) {
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

// A queue is the lock nodes of one kind of lock under a name's znode.
type queue struct {
	mode  driver.Mode // Exclusive, Read (a readers-writer lock) or Leader
	locks []child
}

// queues returns the queues among a name's children: in dlock's layout
// the one of the tree's kind; in a peer's, each kind it keeps there. A
// kazoo mutex, write lock and election candidate are the same node: its
// queue is reported as a readers-writer lock's when it holds readers,
// else as a mutex.
func (d *Driver) queues(names []string, kind driver.Mode) []queue {
	if d.format == dlockFormat {
		return []queue{{kind, d.format.children(names)}}
	}
	kazoo := d.format.layout == LayoutKazoo
	readers := kazoo && slices.ContainsFunc(d.format.children(names), func(c child) bool { return c.kind == kindRead })
	var qs []queue
	for _, m := range []driver.Mode{driver.Exclusive, driver.Read, driver.Leader} {
		if kazoo && (m == driver.Leader || (m == driver.Read) != readers) {
			continue
		}
		if locks := d.format.queueOf(names, m); len(locks) > 0 {
			qs = append(qs, queue{m, locks})
		}
	}
	return qs
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
		ok, st, err := w.s.exists(p)
		if err != nil {
			return fmt.Errorf("read %s: %w", p, err)
		}
		if !ok {
			continue // released since the listing
		}
		info := driver.LockInfo{Name: name, Mode: kind, Token: uint64(st.Czxid), Owner: c.guid, Waiters: len(locks) - held}
		if kind == driver.Read && c.kind == kindWrite {
			info.Mode = driver.Write
		}
		if o, ok := w.owners[p]; ok {
			info.Owner = o
		}
		w.out = append(w.out, info)
	}
	return nil
}
