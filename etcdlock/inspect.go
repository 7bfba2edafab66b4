package etcdlock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlockgo/dlock/driver"
)

// Inspect implements driver.Inspector. It lists the holders of the locks
// whose names start with prefix, sorted by name, then mode, then token;
// Expires is the holder's lease's expiry. In LayoutDlock, read in one
// transaction: the mutexes, the holders of readers-writer locks (one
// entry per reader) and the leaders of elections; semaphores are not
// listed. Owner is the key's value; a leader's is its owner when this
// Driver holds the election and its lease ("lease 1f2e…") otherwise. In
// LayoutConcurrency, see concurrencyTrees. See docs/CLI.md, dlock status.
func (d *Driver) Inspect(ctx context.Context, prefix string) ([]driver.LockInfo, error) {
	if d.isClosed() {
		return nil, driver.ErrClosed
	}
	read := d.dlockTrees
	if d.f.layout == LayoutConcurrency {
		read = d.concurrencyTrees
	}
	trees, err := read(ctx, prefix)
	if err != nil {
		return nil, fmt.Errorf("etcdlock: inspect: %w", err)
	}
	var out []driver.LockInfo
	var leases []clientv3.LeaseID
	owners := d.ownersByKey()
	for _, tree := range trees {
		for name, kvs := range tree.queues {
			if !strings.HasPrefix(name, prefix) {
				continue
			}
			slices.SortFunc(kvs, func(a, b *mvccpb.KeyValue) int { return cmp.Compare(a.CreateRevision, b.CreateRevision) })
			held := 1
			if tree.mode == driver.Read && !isWrite(tree.base, name, kvs[0]) {
				for held < len(kvs) && !isWrite(tree.base, name, kvs[held]) {
					held++
				}
			}
			for _, kv := range kvs[:held] {
				info := driver.LockInfo{Name: name, Mode: tree.mode, Token: uint64(kv.CreateRevision), Owner: string(kv.Value), Waiters: len(kvs) - held}
				switch {
				case tree.mode == driver.Read:
					info.Token = uint64(kv.ModRevision)
					if isWrite(tree.base, name, kv) {
						info.Mode = driver.Write
					}
				case tree.mode == driver.Leader || d.f.layout == LayoutConcurrency:
					info.Owner = "lease " + strconv.FormatInt(kv.Lease, 16)
					if o, ok := owners[string(kv.Key)]; ok {
						info.Owner = o
					}
				}
				out = append(out, info)
				leases = append(leases, clientv3.LeaseID(kv.Lease))
			}
		}
	}
	if err := d.expiries(ctx, out, leases); err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b driver.LockInfo) int {
		return cmp.Or(strings.Compare(a.Name, b.Name), cmp.Compare(a.Mode, b.Mode), cmp.Compare(a.Token, b.Token))
	})
	return out, nil
}

// A tree is the queues of one kind of lock, by name: keys that start
// with base.
type tree struct {
	base   string
	mode   driver.Mode
	queues map[string][]*mvccpb.KeyValue
}

// dlockTrees reads, in one transaction, the trees of LayoutDlock's
// mutexes, readers-writer locks and elections under prefix.
func (d *Driver) dlockTrees(ctx context.Context, prefix string) ([]tree, error) {
	// Every mutex key sorts after <Prefix>/$ (names start with none of the
	// characters up to '$'), and every key of another kind, <Prefix>/#...,
	// before it; so for an empty prefix the mutexes' range leaves the
	// other kinds out.
	mutexes := clientv3.OpGet(d.f.prefix+"/"+prefix, clientv3.WithPrefix())
	if prefix == "" {
		mutexes = clientv3.OpGet(d.f.prefix+"/$", clientv3.WithRange(clientv3.GetPrefixRangeEnd(d.f.prefix+"/")))
	}
	trees := []tree{{base: d.f.prefix + "/", mode: driver.Exclusive}, {base: d.f.prefix + "/#rw/", mode: driver.Read},
		{base: d.f.prefix + "/#elect/", mode: driver.Leader}}
	rctx, cancel := d.req(ctx)
	resp, err := d.c.Txn(rctx).Then(mutexes,
		clientv3.OpGet(trees[1].base+prefix, clientv3.WithPrefix()),
		clientv3.OpGet(trees[2].base+prefix, clientv3.WithPrefix())).Commit()
	cancel()
	if err != nil {
		return nil, err
	}
	for i := range trees {
		trees[i].queues = queues(trees[i].base, resp.Responses[i].GetResponseRange().GetKvs())
	}
	return trees, nil
}

// queues groups the keys kvs, of the tree whose keys are
// base<name>/#<rest>, by lock name. Names hold no '#', so the first "/#"
// of a key ends its name.
func queues(base string, kvs []*mvccpb.KeyValue) map[string][]*mvccpb.KeyValue {
	m := map[string][]*mvccpb.KeyValue{}
	for _, kv := range kvs {
		rest, ok := strings.CutPrefix(string(kv.Key), base)
		if !ok {
			continue
		}
		name, _, ok := strings.Cut(rest, "/#")
		if !ok || name == "" || strings.HasPrefix(name, "#") {
			continue
		}
		m[name] = append(m[name], kv)
	}
	return m
}

// isWrite reports whether kv, a key of the readers-writer lock called
// name in the tree base, is a writer's.
func isWrite(base, name string, kv *mvccpb.KeyValue) bool {
	return strings.HasPrefix(string(kv.Key), base+name+"/#w")
}

// ownersByKey returns the owners of the locks this driver holds, by key.
func (d *Driver) ownersByKey() map[string]string {
	d.mu.Lock()
	defer d.mu.Unlock()
	m := make(map[string]string, len(d.locks))
	for owner, l := range d.locks {
		m[l.k.key] = owner
	}
	return m
}

// expiries sets the Expires of each out[i] from the remaining TTL of
// leases[i], asking once per lease. A lease found expired leaves Expires
// zero (its keys are going).
func (d *Driver) expiries(ctx context.Context, out []driver.LockInfo, leases []clientv3.LeaseID) error {
	ttls := map[clientv3.LeaseID]time.Time{}
	for i, id := range leases {
		exp, ok := ttls[id]
		if !ok && id != clientv3.NoLease {
			rctx, cancel := d.req(ctx)
			now := time.Now()
			resp, err := d.c.TimeToLive(rctx, id)
			cancel()
			if err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
				return fmt.Errorf("etcdlock: inspect: lease %x: %w", int64(id), err)
			}
			if err == nil && resp.TTL > 0 {
				exp = now.Add(time.Duration(resp.TTL) * time.Second)
			}
			ttls[id] = exp
		}
		out[i].Expires = exp
	}
	return nil
}
