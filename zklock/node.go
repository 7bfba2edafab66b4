package zklock

import (
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/dlockgo/dlock/driver"
)

// Lock nodes are named _c_<guid>-<kind>#<sequence>, where kind is "lock"
// for a mutex or an election candidate, "read" or "write" for the two
// sides of a readers-writer lock and "permit" for a semaphore. The guid
// (the owner value when it is 32 hex digits, as dlock's are) lets a client
// find a node whose creation reply it lost. The '#' cannot occur in a lock
// name, so a lock node never collides with the container of a longer name
// ("a" and "a/b" share the znode <prefix>/a).
const (
	nodePrefix = "_c_"
	guidLen    = 32
)

// The kinds of lock node, as they appear in dlock's node names, and
// kindLatch, a Curator LeaderLatch candidate.
const (
	kindLock   = "lock"
	kindRead   = "read"
	kindWrite  = "write"
	kindPermit = "permit"
	kindLatch  = "latch"
)

// A node is one acquisition's ephemeral sequential znode.
type node struct {
	s      *session
	name   string // the lock's name
	owner  string
	parent string // <prefix>/<name>
	path   string // parent/_c_<guid>-lock#<seq>
	guid   string
	seq    uint32
	token  uint64 // the node's czxid
	mode   driver.Mode
	kind   string // kindLock, kindRead, ...
	data   []byte // the node's data: an election candidate's value
	limit  int    // a semaphore's number of permits

	// recovered: found again after a lost creation reply. A second node
	// with the same guid may then exist; release removes it too.
	recovered bool

	gone       atomic.Bool       // set once, when the lock ends
	notice     driver.LossNotice // Grant.OnLost: signalled when the lock ends
	guardTimer *time.Timer       // sets the node's watch (see guard)
}

// base returns the node's name within its parent.
func (n *node) base() string { return n.path[len(n.parent)+1:] }

// lose marks n gone and signals its loss, once. The caller holds none of
// the driver's locks.
func (n *node) lose() {
	if n.gone.CompareAndSwap(false, true) {
		n.notice.Signal()
	}
}

// child is a lock node in a listing.
type child struct {
	name string
	guid string
	kind string
	seq  uint32
}

// parseChild parses a lock node's name; ok is false for other children
// (the containers of longer names).
func parseChild(name string) (c child, ok bool) {
	const kindAt = len(nodePrefix) + guidLen + 1
	if len(name) <= kindAt || !strings.HasPrefix(name, nodePrefix) || name[kindAt-1] != '-' {
		return child{}, false
	}
	kind, seq, found := strings.Cut(name[kindAt:], "#")
	if !found {
		return child{}, false
	}
	switch kind {
	case kindLock, kindRead, kindWrite, kindPermit:
	default:
		return child{}, false
	}
	// The sequence number can be negative (see parseSeq).
	v, err := strconv.ParseInt(seq, 10, 64)
	if err != nil {
		return child{}, false
	}
	return child{name: name, guid: name[len(nodePrefix) : len(nodePrefix)+guidLen], kind: kind, seq: uint32(int32(v))}, true
}

// before orders sequence numbers in serial-number arithmetic, so that the
// order survives the wrap-around of the parent's 32-bit cversion (live
// nodes always lie within 2^31 of each other).
func before(a, b uint32) bool { return int32(a-b) < 0 }
