package etcdlock

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlockgo/dlock/driver"
)

// Supports implements driver.Moder: in LayoutDlock the driver takes every
// kind of lock, the mutex, both sides of readers-writer locks, semaphore
// permits and election leadership; in LayoutConcurrency, the mutex and
// election leadership only.
func (d *Driver) Supports(m driver.Mode) bool {
	switch m {
	case driver.Exclusive, driver.Leader:
		return true
	case driver.Read, driver.Write, driver.Permit:
		return d.layout == LayoutDlock
	}
	return false
}

// queuePrefix returns the prefix of every key that holds or awaits the
// lock of kind m called name. In LayoutDlock a mutex's keys are
// <Prefix>/<name>/#...; the other kinds' are <Prefix>/#<kind>/<name>/#... .
// Names contain no '#', so no kind's queue prefix starts another's, nor
// another name's. In LayoutConcurrency the mutex and the election called
// name share the prefix lockPrefix(name) + "/", as in etcd's concurrency
// package.
func (d *Driver) queuePrefix(m driver.Mode, name string) string {
	if d.layout == LayoutConcurrency {
		return d.lockPrefix(name) + "/"
	}
	switch m {
	case driver.Read, driver.Write:
		return d.prefix + "/#rw/" + name + "/#"
	case driver.Permit:
		return d.prefix + "/#sem/" + name + "/#"
	case driver.Leader:
		return d.prefix + "/#elect/" + name + "/#"
	}
	return d.prefix + "/" + name + "/#"
}

// keyKind is what follows the queue prefix in a key of mode m, before the
// session's lease: the side of a readers-writer lock, so that the write
// keys form a range of their own.
func keyKind(m driver.Mode) string {
	switch m {
	case driver.Read:
		return "r"
	case driver.Write:
		return "w"
	}
	return ""
}

// keyValue is what a key of r's acquisition holds: the candidate's value
// in an election; otherwise the owner, or in LayoutConcurrency nothing,
// as concurrency.Mutex writes.
func (d *Driver) keyValue(r driver.Request) string {
	switch {
	case r.Mode == driver.Leader:
		return r.Value
	case d.layout == LayoutConcurrency:
		return ""
	}
	return r.Owner
}

// admit grants the lock to a waiter whose check found it holds. A mutex's
// or a candidate's token is its key's create revision: only the oldest key
// holds, so keys are granted in the order of their revisions. Readers,
// writers and permits are not granted in that order (a reader that
// arrives once a writer has gone holds at once, while an older reader may
// not have woken yet), so the waiter puts its key again, if it still
// exists with its create revision, and its token is the revision of that
// write: greater than every grant's before, distinct from every other's.
// The put also tells a semaphore's next waiter, which watches the key,
// that this one has left the queue.
func (d *Driver) admit(ctx context.Context, s *session, r driver.Request, k keys, myRev int64) (driver.Grant, error) {
	if r.Mode == driver.Exclusive || r.Mode == driver.Leader {
		return d.grant(s, r, k, myRev, uint64(myRev))
	}
	rctx, cancel := d.req(ctx)
	resp, err := d.c.Txn(rctx).If(clientv3.Compare(clientv3.CreateRevision(k.key), "=", myRev)).
		Then(clientv3.OpPut(k.key, d.keyValue(r), clientv3.WithLease(s.id))).Commit()
	cancel()
	if err != nil {
		// A put that lands after the deletion fails its comparison.
		d.abandon(s, k, false)
		if ctx.Err() == nil && d.ctx.Err() == nil {
			return driver.Grant{}, fmt.Errorf("etcdlock: acquire %q: %w", r.Name, err)
		}
		return driver.Grant{}, err
	}
	if !resp.Succeeded {
		d.free(s, k.slot)
		return driver.Grant{}, fmt.Errorf("%w: key %q", errRequeue, k.key)
	}
	return d.grant(s, r, k, myRev, uint64(resp.Header.Revision))
}
