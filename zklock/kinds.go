package zklock

import "github.com/dlockgo/dlock/driver"

// Each kind of lock but the mutex (<prefix>/x) keeps its names under a
// znode of its own below the prefix (<prefix>/#rw/x, ...); no lock name
// can contain a '#', so these never meet a mutex's znode.
const (
	rwDir    = "/#rw/"
	semDir   = "/#sem/"
	electDir = "/#elect/"
)

// dir returns the znode of the lock called name in mode m.
func (d *Driver) dir(m driver.Mode, name string) string {
	return d.opt.Prefix + d.format.dirs[m] + name
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
	case driver.Permit:
		return permitPlan(locks, i, n.limit)
	}
	return writePlan(locks, i)
}
