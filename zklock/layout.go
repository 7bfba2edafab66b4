package zklock

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/dlockgo/dlock/driver"
)

// Layout is the format of a driver's lock nodes: dlock's own, or a peer
// library's, so that dlock and that library's clients take the same locks
// (see docs/INTEROP.md).
type Layout string

// The layouts.
const (
	// LayoutDlock is dlock's own format, the default: each kind of lock
	// under a znode of its own, and the one-notification handover.
	LayoutDlock Layout = "dlock"
	// LayoutCurator is Apache Curator's: InterProcessMutex,
	// InterProcessReadWriteLock and LeaderLatch on the name's znode.
	LayoutCurator Layout = "curator"
	// LayoutKazoo is kazoo's (Python): Lock, ReadLock, WriteLock and
	// Election on the name's znode.
	LayoutKazoo Layout = "kazoo"
)

// A format names and reads one layout's lock nodes, and says where each
// mode's nodes live.
type format struct {
	layout Layout
	// A node's name is head, the guid (as a UUID when dashed), the kind's
	// tag, then the sequence number the server appends.
	head   string
	dashed bool
	tags   map[string]string // by kind

	// dirs: where a mode's nodes live, below the prefix ("/" for the
	// name's znode itself); kinds: the kind of node it queues. A mode
	// missing from dirs is not supported.
	dirs  map[driver.Mode]string
	kinds map[driver.Mode]string

	// marks: a release sets the node's data in the transaction that
	// deletes it, telling the waiter behind that its predecessor held the
	// lock (dlock's own handover). A peer's waiters may listen for the
	// deletion only (Curator's LeaderLatch does), and a data change
	// consumes a ZooKeeper watch, so the peers' layouts plainly delete.
	marks bool
	// containers: parents are container znodes, which the server removes
	// once empty. kazoo creates its lock's znode once per Lock object, as
	// a persistent node, and fails when it has gone: its layout makes
	// persistent ones too.
	containers bool
}

var (
	dlockFormat = &format{
		layout: LayoutDlock,
		head:   nodePrefix,
		tags:   map[string]string{kindLock: "-lock#", kindRead: "-read#", kindWrite: "-write#", kindPermit: "-permit#"},
		dirs: map[driver.Mode]string{
			driver.Exclusive: "/", driver.Read: rwDir, driver.Write: rwDir,
			driver.Permit: semDir, driver.Leader: electDir,
		},
		kinds: map[driver.Mode]string{
			driver.Exclusive: kindLock, driver.Read: kindRead, driver.Write: kindWrite,
			driver.Permit: kindPermit, driver.Leader: kindLock,
		},
		marks:      true,
		containers: true,
	}
	// A peer's kinds all live on the name's znode; it has no semaphore.
	peerDirs = map[driver.Mode]string{driver.Exclusive: "/", driver.Read: "/", driver.Write: "/", driver.Leader: "/"}
	// Curator: protected nodes _c_<uuid>-<lock name><seq>, ordered by the
	// text after the lock name: "lock-" for InterProcessMutex (and
	// LeaderSelector), "__READ__" and "__WRIT__" for the two sides of
	// InterProcessReadWriteLock, "latch-" for LeaderLatch.
	curatorFormat = &format{
		layout: LayoutCurator,
		head:   nodePrefix,
		dashed: true,
		tags:   map[string]string{kindLock: "-lock-", kindRead: "-__READ__", kindWrite: "-__WRIT__", kindLatch: "-latch-"},
		dirs:   peerDirs,
		kinds: map[driver.Mode]string{
			driver.Exclusive: kindLock, driver.Read: kindRead, driver.Write: kindWrite, driver.Leader: kindLatch,
		},
		containers: true,
	}
	// kazoo: <uuid hex>__lock__<seq> for Lock, WriteLock and Election
	// (which is a Lock whose identifier is the candidate's value), and
	// <uuid hex>__rlock__<seq> for ReadLock.
	kazooFormat = &format{
		layout: LayoutKazoo,
		tags:   map[string]string{kindWrite: "__lock__", kindRead: "__rlock__"},
		dirs:   peerDirs,
		kinds: map[driver.Mode]string{
			driver.Exclusive: kindWrite, driver.Read: kindRead, driver.Write: kindWrite, driver.Leader: kindWrite,
		},
	}
)

// formatOf returns the format of layout l ("" is LayoutDlock).
func formatOf(l Layout) (*format, error) {
	switch l {
	case "", LayoutDlock:
		return dlockFormat, nil
	case LayoutCurator:
		return curatorFormat, nil
	case LayoutKazoo:
		return kazooFormat, nil
	}
	return nil, fmt.Errorf("zklock: unknown layout %q (want %s, %s or %s)", l, LayoutDlock, LayoutCurator, LayoutKazoo)
}

// Supports implements driver.Moder: the ZooKeeper driver does every mode
// (mutex, readers-writer lock, semaphore and election) in dlock's own
// layout, and every mode but the semaphore in Curator's and kazoo's.
func (d *Driver) Supports(m driver.Mode) bool {
	_, ok := d.format.dirs[m]
	return ok
}

// UnsupportedReason says why the driver lacks mode m ("" when it has it):
// dlock adds it to the error of a request for that mode.
func (d *Driver) UnsupportedReason(m driver.Mode) string {
	if d.Supports(m) {
		return ""
	}
	if m == driver.Permit {
		return fmt.Sprintf("the %s layout has no semaphore: the peer's semaphore recipe counts leases under a second lock, a format dlock does not share", d.format.layout)
	}
	return fmt.Sprintf("the %s layout has no %v", d.format.layout, m)
}

// nodePath returns the path a node of the given kind and guid is created
// with under parent; the server appends the sequence number. It is one
// concatenation (one allocation) on every acquisition.
func (f *format) nodePath(parent, guid, kind string) string {
	if f.dashed {
		guid = guid[:8] + "-" + guid[8:12] + "-" + guid[12:16] + "-" + guid[16:20] + "-" + guid[20:]
	}
	return parent + "/" + f.head + guid + f.tags[kind]
}

// parse parses a lock node's name; ok is false for other children (the
// znodes of longer names). dlock's own format is read strictly; a peer's
// as the peer reads it: the last occurrence of a kind's tag followed by a
// sequence number.
func (f *format) parse(name string) (c child, ok bool) {
	if f == dlockFormat {
		return parseChild(name)
	}
	for kind, tag := range f.tags {
		i := strings.LastIndex(name, tag)
		if i < 0 {
			continue
		}
		seq, ok := parseSeq(name[i+len(tag):])
		if !ok {
			continue
		}
		guid := strings.ReplaceAll(strings.TrimPrefix(name[:i], f.head), "-", "")
		return child{name: name, guid: guid, kind: kind, seq: seq}, true
	}
	return child{}, false
}

// parseSeq parses the sequence number ZooKeeper appends to a sequential
// node's name: the parent's int32 cversion with %010d (ten characters,
// the sign included once it wrapped around to negative numbers).
func parseSeq(s string) (uint32, bool) {
	if len(s) != 10 || strings.Trim(strings.TrimPrefix(s, "-"), "0123456789") != "" {
		return 0, false
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, false
	}
	return uint32(int32(v)), true
}

// children returns the lock nodes among a parent's children, of every
// kind, in queue order (by sequence number).
func (f *format) children(names []string) []child {
	locks := make([]child, 0, len(names))
	for _, n := range names {
		if c, ok := f.parse(n); ok {
			locks = append(locks, c)
		}
	}
	slices.SortFunc(locks, func(a, b child) int {
		switch {
		case a.seq == b.seq:
			return 0
		case before(a.seq, b.seq):
			return -1
		}
		return 1
	})
	return locks
}

// queueOf returns the lock nodes among a parent's children that queue
// with nodes of mode m, in queue order: both sides of a readers-writer
// lock, or else the nodes of m's kind. In dlock's own layout every kind
// has a znode of its own, so that is all of them; a peer's puts its kinds
// side by side, and each of its recipes reads only its own (kazoo's Lock
// ignores ReadLock's nodes, Curator's InterProcessMutex the readers-writer
// lock's).
func (f *format) queueOf(names []string, m driver.Mode) []child {
	locks := f.children(names)
	kind := f.kinds[m]
	return slices.DeleteFunc(locks, func(c child) bool {
		if m == driver.Read || m == driver.Write {
			return c.kind != kindRead && c.kind != kindWrite
		}
		return c.kind != kind
	})
}

// isLockNode reports whether a child of a name's znode is a lock node
// rather than the znode of a longer name.
func (f *format) isLockNode(name string) bool {
	if f == dlockFormat {
		return strings.Contains(name, "#")
	}
	_, ok := f.parse(name)
	return ok
}
