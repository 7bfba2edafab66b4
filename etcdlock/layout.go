package etcdlock

import (
	"cmp"
	"context"
	"fmt"
	"strconv"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
)

// Layout is how a driver lays its locks out in etcd's key space
// (Options.Layout, URL parameter layout). The zero value is LayoutDlock.
type Layout string

const (
	// LayoutDlock is the driver's own format, the default: every kind of
	// lock, each under a key range of its own (see the package
	// documentation, "How a lock works").
	LayoutDlock Layout = "dlock"
	// LayoutConcurrency is the format of etcd's concurrency package
	// (concurrency.Mutex, concurrency.Election), `etcdctl lock` and
	// `etcdctl elect`, so that dlock and they exclude each other on a name
	// and agree on one leader. It has mutexes and elections only. See
	// docs/ETCD.md, "Layouts".
	LayoutConcurrency Layout = "concurrency"
)

// errLayout says what a layout may be.
var errLayout = fmt.Errorf("unknown layout: want %q or %q", LayoutDlock, LayoutConcurrency)

func (l Layout) known() bool { return l == LayoutDlock || l == LayoutConcurrency }

// Layout returns the driver's layout.
func (d *Driver) Layout() Layout { return d.f.layout }

// urlPrefix returns the key prefix of a URL's path. In LayoutDlock it is
// the path without its slashes, DefaultPrefix when that is empty. In
// LayoutConcurrency only the slash that ends the host part is dropped,
// so that the prefix can be empty (etcd://host or etcd://host/) or "/"
// (etcd://host//).
func (l Layout) urlPrefix(path string) string {
	if l == LayoutConcurrency {
		return strings.TrimPrefix(path, "/")
	}
	return cmp.Or(strings.Trim(path, "/"), DefaultPrefix)
}

// A format is the driver's layout with its prefix: where each lock's keys
// are and what they hold, as its methods.
type format struct {
	layout Layout
	prefix string
}

// newFormat returns the format of layout (known, "" for LayoutDlock)
// with prefix, as Options.Prefix describes it: in LayoutDlock without
// trailing slashes, DefaultPrefix when empty.
func newFormat(layout Layout, prefix string) format {
	f := format{layout: cmp.Or(layout, LayoutDlock), prefix: prefix}
	if f.layout == LayoutDlock {
		f.prefix = cmp.Or(strings.TrimRight(prefix, "/"), DefaultPrefix)
	}
	return f
}

// supports reports whether f has mode m: LayoutDlock every kind of lock,
// LayoutConcurrency the mutex and the election.
func (f format) supports(m driver.Mode) bool {
	switch m {
	case driver.Exclusive, driver.Leader:
		return true
	case driver.Read, driver.Write, driver.Permit:
		return f.layout == LayoutDlock
	}
	return false
}

// A lockReq is a driver.Request resolved once, where an acquisition
// enters the driver (Driver.resolve).
type lockReq struct {
	driver.Request
	// queue starts every key that holds or awaits the lock (format.queue);
	// block, the keys that bar an immediate grant, the newest of which a
	// waiter waits for: the whole queue, or a reader's write keys.
	queue, block string
	// kind, between queue and the lease in the caller's key, is the side
	// of a readers-writer lock ("r" or "w"): the write keys are a range.
	kind  string
	value string // what the caller's key holds
	// slot is the mode whose key slots the key takes: in LayoutConcurrency
	// a name's mutex and election share one queue, so one set of keys.
	slot driver.Mode
	secs int64 // the lease TTL of the session it uses, leaseSeconds(TTL)
}

// resolve refuses a request the driver cannot serve (which only a direct
// caller of the driver sends: a Locker asks Supports first), and resolves
// the others.
func (d *Driver) resolve(r driver.Request) (lockReq, error) {
	f := d.f
	if !f.supports(r.Mode) {
		return lockReq{}, fmt.Errorf("etcdlock: %s lock %q: %w (%s)", r.Mode, r.Name, driver.ErrUnsupported, f.unsupported())
	}
	queue := f.queue(r.Mode, r.Name)
	block, kind, value, slot := queue, "", r.Owner, r.Mode
	switch {
	case r.Mode == driver.Read:
		kind, block = "r", queue+"w"
	case r.Mode == driver.Write:
		kind = "w"
	case r.Mode == driver.Leader:
		value = r.Value // the candidate's
	case f.layout == LayoutConcurrency:
		value = "" // as concurrency.Mutex writes
	}
	if f.layout == LayoutConcurrency {
		slot = driver.Exclusive
	}
	return lockReq{Request: r, queue: queue, block: block, kind: kind, value: value, slot: slot, secs: leaseSeconds(r.TTL)}, nil
}

// queue returns the prefix of every key that holds or awaits the lock of
// kind m called name: in LayoutDlock <Prefix>/<name>/#... for a mutex,
// <Prefix>/#<kind>/<name>/#... for the others (names contain no '#', so no
// queue prefix starts another's); in LayoutConcurrency lockPrefix(name) +
// "/" for both the mutex and the election, as in etcd's package.
func (f format) queue(m driver.Mode, name string) string {
	if f.layout == LayoutConcurrency {
		return f.lockPrefix(name) + "/"
	}
	switch m {
	case driver.Read, driver.Write:
		return f.prefix + "/#rw/" + name + "/#"
	case driver.Permit:
		return f.prefix + "/#sem/" + name + "/#"
	case driver.Leader:
		return f.prefix + "/#elect/" + name + "/#"
	}
	return f.prefix + "/" + name + "/#"
}

// lockPrefix is, in LayoutConcurrency, the prefix given to etcd's
// concurrency.NewMutex or NewElection (the NAME of `etcdctl lock NAME`):
// the driver's prefix and the name joined by a slash, unless the prefix
// is empty or ends with one (docs/ETCD.md, "Layouts", has examples). The
// keys are lockPrefix + "/" + the lease in hex.
func (f format) lockPrefix(name string) string {
	if f.prefix == "" || strings.HasSuffix(f.prefix, "/") {
		return f.prefix + name
	}
	return f.prefix + "/" + name
}

// unsupported says why f lacks the modes it lacks.
func (f format) unsupported() string {
	return fmt.Sprintf("layout %s has mutexes and elections only: etcd's concurrency package has no other kind", f.layout)
}

// concurrencyTrees reads the one tree of LayoutConcurrency under prefix:
// the keys <lockPrefix(name)>/<lease hex>[.<n>] of valid names attached
// to that lease, leaving out anyone else's. The format does not tell a
// mutex's keys from an election's, so every queue is listed as a mutex,
// its oldest key the holder, its create revision the token; Owner is the
// owner for locks this driver holds, "lease <hex>" for the others (etcd's
// package stores no owner).
func (d *Driver) concurrencyTrees(ctx context.Context, prefix string) ([]tree, error) {
	base := d.f.lockPrefix("")
	// With no prefix at all, WithPrefix ranges over the whole key space.
	rctx, cancel := d.req(ctx)
	resp, err := d.c.Get(rctx, base+prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	cancel()
	if err != nil {
		return nil, err
	}
	byName := map[string][]*mvccpb.KeyValue{}
	for _, kv := range resp.Kvs {
		rest, ok := strings.CutPrefix(string(kv.Key), base)
		j := strings.LastIndexByte(rest, '/')
		if !ok || j < 0 || kv.Lease == 0 {
			continue
		}
		name, last := rest[:j], rest[j+1:]
		if !strings.HasPrefix(name, prefix) || !leaseSegment(last, kv.Lease) || dlock.ValidateName(name) != nil {
			continue
		}
		byName[name] = append(byName[name], kv)
	}
	return []tree{{base: base, mode: driver.Exclusive, queues: byName}}, nil
}

// leaseSegment reports whether s, the last segment of a key, names lease
// as a lock key's does: the lease in lower-case hex, optionally followed
// by ".<n>" (a driver's further acquisitions of the name).
func leaseSegment(s string, lease int64) bool {
	hex, n, dotted := strings.Cut(s, ".")
	if dotted {
		if _, err := strconv.ParseUint(n, 10, 31); err != nil {
			return false
		}
	}
	return hex == strconv.FormatInt(lease, 16)
}

// Supports implements driver.Moder: in LayoutDlock every kind of lock
// (mutex, both sides of readers-writer locks, semaphore permits, election
// leadership); in LayoutConcurrency the mutex and election leadership.
func (d *Driver) Supports(m driver.Mode) bool { return d.f.supports(m) }

// UnsupportedReason says why the driver lacks mode m ("" when it has it):
// dlock adds it to the error of a request for that mode.
func (d *Driver) UnsupportedReason(m driver.Mode) string {
	if d.f.supports(m) {
		return ""
	}
	return d.f.unsupported()
}
