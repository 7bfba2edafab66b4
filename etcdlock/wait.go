package etcdlock

import (
	"context"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlockgo/dlock/driver"
)

// Probing a fresh watch. etcd registers a new watch at its revision + 1
// after reading that revision; a write landing in between leaves the
// watch "unsynced", and etcd catches those up only every 100ms, so a
// deletion then reaches the waiter up to 100ms late. No start revision
// avoids it (a later one would drop the very event). So until a read
// proves that no write slipped in, or for probeWindow, the waiter also
// reads its predecessor, cheaply (serializable), at probeFirst, then at
// doubling offsets.
const (
	probeFirst  = 5 * time.Millisecond
	probeWindow = 110 * time.Millisecond
)

// target is what a waiter waits for: the deletion of the key just ahead
// of it that it must outlive (the zero target: nothing, the lock is its);
// for a semaphore, also a put on that key (the waiter ahead was admitted),
// or the deletion of any key of the queue.
type target struct {
	key   string // the key; with whole, the queue's prefix
	rev   int64  // the key's create revision: a key of the same name made later is another key
	puts  bool   // a put on key is a change too
	mod   int64  // with puts: key's mod revision when read
	whole bool   // any deletion under the prefix key is a change
	max   int64  // with whole: the waiter's create revision
	count int64  // with whole: how many keys, up to max, there were
}

// same reports whether t and o name the same thing to watch.
func (t target) same(o target) bool {
	return t.key == o.key && t.rev == o.rev && t.puts == o.puts && t.whole == o.whole
}

// predWatch follows the target of a waiter.
type predWatch struct {
	t       target // key "" when no watch runs
	ch      clientv3.WatchChan
	cancel  context.CancelFunc
	from    int64 // the watch reports changes after this revision
	born    time.Time
	synced  bool          // proven in sync: no probes needed
	probe   *time.Timer   // fires at born + probeAt
	probeAt time.Duration // offset of the next probe
}

func (w *predWatch) stop() {
	if w.cancel != nil {
		w.cancel()
		w.cancel = nil
	}
	w.t = target{}
	w.probe.Stop()
}

// nextProbe schedules the next probe, if the watch may still be unsynced.
func (w *predWatch) nextProbe() {
	if w.synced || w.probeAt >= probeWindow {
		return
	}
	w.probeAt = min(2*w.probeAt, probeWindow)
	w.probe.Reset(time.Until(w.born.Add(w.probeAt)))
}

// wait waits until the caller's key, created at myRev, holds the lock.
// What it waits for is looked up first, at seen, a revision the caller's
// member applied.
func (d *Driver) wait(ctx context.Context, s *session, q *lockReq, k keys, myRev, seen int64) (driver.Grant, error) {
	w := &predWatch{probe: time.NewTimer(time.Hour)}
	w.probe.Stop()
	defer w.stop()
	every := max(s.ttl, time.Second)
	recheck := time.NewTimer(every) // a safety net: a watch is not trusted for ever
	defer recheck.Stop()
	var t target
	needCheck := true
	at := seen      // a revision applied where the watch runs, to read at; 0: now
	watchFails := 0 // in a row, for the pause before the next try
	for {
		if needCheck {
			needCheck = false
			st, err := d.check(ctx, q, k, myRev, at)
			at = 0
			switch {
			case err != nil:
				d.abandon(s, k, false)
				return driver.Grant{}, err
			case st.gone:
				d.free(s, k.slot)
				return driver.Grant{}, fmt.Errorf("%w: key %q", errRequeue, k.key)
			case st.t.key == "":
				return d.admit(ctx, s, q, k, myRev)
			}
			t, seen = st.t, st.rev
			if w.t.same(t) {
				w.t.mod, w.t.count = t.mod, t.count
				if st.cur == w.from {
					w.synced = true // no write since the watch's revision
				}
			}
			recheck.Reset(every)
		}
		if !w.t.same(t) {
			w.stop()
			if !d.watch(ctx, s, w, q.Name, t) {
				if err := d.waitErr(ctx, s); err != nil {
					d.abandon(s, k, false)
					return driver.Grant{}, err
				}
				needCheck = true
				watchFails++
				_ = pause(ctx, d.ctx, watchFails) // an error shows at the next check
				continue
			}
			watchFails = 0
			// t was as read at seen; the watch reports changes after from.
			// A gap between them is read again.
			if w.from > seen {
				needCheck, at = true, w.from
				continue
			}
		}
		select {
		case wr, ok := <-w.ch:
			switch {
			case !ok || wr.Canceled || wr.Err() != nil:
				w.stop() // watch again after the check
			case w.t.changed(wr.Events):
				at = wr.Header.Revision
				d.woke(q.Name, w.t.key)
			}
			needCheck = true
		case <-w.probe.C:
			if rev, changed := d.probe(ctx, w); changed {
				at, needCheck = rev, true
				d.woke(q.Name, w.t.key)
			}
		case <-recheck.C:
			needCheck = true
		case <-s.done:
		case <-ctx.Done():
		case <-d.ctx.Done():
		}
		if err := d.waitErr(ctx, s); err != nil {
			d.abandon(s, k, false)
			return driver.Grant{}, err
		}
	}
}

// admit grants the lock to a waiter whose check found it holds. A mutex's
// or a candidate's token is its key's create revision: only the oldest key
// holds, so keys are granted in revision order. Readers, writers and
// permits are not (a reader arriving once a writer has gone holds at once,
// while an older reader may not have woken yet), so the waiter puts its
// key again if it still exists with its create revision, and that write's
// revision is its token: greater than every earlier grant's, distinct from
// all. The put also tells a semaphore's next waiter, which watches the
// key, that this one has left the queue.
func (d *Driver) admit(ctx context.Context, s *session, q *lockReq, k keys, myRev int64) (driver.Grant, error) {
	if q.Mode == driver.Exclusive || q.Mode == driver.Leader {
		return d.grant(s, q, k, myRev, uint64(myRev))
	}
	rctx, cancel := d.req(ctx)
	resp, err := d.c.Txn(rctx).If(clientv3.Compare(clientv3.CreateRevision(k.key), "=", myRev)).
		Then(clientv3.OpPut(k.key, q.value, clientv3.WithLease(s.id))).Commit()
	cancel()
	if err != nil {
		// A put that lands after the deletion fails its comparison.
		d.abandon(s, k, false)
		if ctx.Err() == nil && d.ctx.Err() == nil {
			return driver.Grant{}, fmt.Errorf("etcdlock: acquire %q: %w", q.Name, err)
		}
		return driver.Grant{}, err
	}
	if !resp.Succeeded {
		d.free(s, k.slot)
		return driver.Grant{}, fmt.Errorf("%w: key %q", errRequeue, k.key)
	}
	return d.grant(s, q, k, myRev, uint64(resp.Header.Revision))
}

// watch starts w on t and waits for etcd to create it; false when the
// watch failed or the wait must stop.
func (d *Driver) watch(ctx context.Context, s *session, w *predWatch, name string, t target) bool {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	w.t, w.cancel, w.synced = t, cancel, false
	opts := []clientv3.OpOption{clientv3.WithCreatedNotify()}
	if !t.puts {
		opts = append(opts, clientv3.WithFilterPut())
	}
	if t.whole {
		opts = append(opts, clientv3.WithPrefix())
	}
	w.ch = d.c.Watch(wctx, t.key, opts...)
	select {
	case wr, ok := <-w.ch:
		if !ok || !wr.Created || wr.Canceled || wr.Err() != nil {
			w.stop()
			return false
		}
		if f := d.hooks.watch; f != nil {
			f(name, t.key) // counted once etcd has created it
		}
		w.from, w.born = wr.Header.Revision, time.Now()
		w.probeAt = probeFirst
		w.probe.Reset(probeFirst)
		return true
	case <-s.done:
	case <-ctx.Done():
	case <-d.ctx.Done():
	}
	w.stop()
	return false
}

// changed reports whether evs, events of a watch on t, change what the
// waiter waits for.
func (t target) changed(evs []*clientv3.Event) bool {
	for _, ev := range evs {
		if ev.Type == mvccpb.DELETE || t.puts {
			return true
		}
	}
	return false
}

// probe reads whether the watched target has changed (the key is gone
// or, with puts, was written; with whole, the count of keys up to the
// waiter's changed); it returns the revision read when it has.
func (d *Driver) probe(ctx context.Context, w *predWatch) (int64, bool) {
	rctx, cancel := d.req(ctx)
	var resp *clientv3.GetResponse
	var err error
	if w.t.whole {
		// Keys, not a count: etcd counts a range before it filters it.
		resp, err = d.c.Get(rctx, w.t.key, clientv3.WithPrefix(), clientv3.WithMaxCreateRev(w.t.max),
			clientv3.WithKeysOnly(), clientv3.WithLimit(w.t.count), clientv3.WithSerializable())
	} else {
		resp, err = d.c.Get(rctx, w.t.key, clientv3.WithSerializable(), clientv3.WithKeysOnly())
	}
	cancel()
	if err == nil {
		switch {
		case w.t.whole && int64(len(resp.Kvs)) != w.t.count,
			!w.t.whole && (len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != w.t.rev),
			!w.t.whole && w.t.puts && resp.Kvs[0].ModRevision != w.t.mod:
			return resp.Header.Revision, true
		}
		if resp.Header.Revision == w.from {
			w.synced = true
		}
	}
	w.nextProbe()
	return 0, false
}

func (d *Driver) woke(name, key string) {
	if f := d.hooks.wake; f != nil {
		f(name, key)
	}
}

// waitErr tells why a wait must stop: ctx ended, the driver closed, or the
// session ended (then errRequeue).
func (d *Driver) waitErr(ctx context.Context, s *session) error {
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case d.ctx.Err() != nil:
		return driver.ErrClosed
	}
	select {
	case <-s.done:
		return fmt.Errorf("%w: %w", errRequeue, s.endCause())
	default:
		return nil
	}
}

// checked is what check read.
type checked struct {
	gone bool   // the caller's key is gone (its lease expired, or deleted)
	t    target // what to wait for; key "" when the lock is the caller's
	rev  int64  // the revision read
	cur  int64  // the serving member's revision at the time
}

// check reads, in one request, whether the caller's key still exists with
// its create revision (then its lease was alive at the revision read),
// and what it must wait for (see checkOps). With at > 0 the read is
// serializable, at revision at, which the member serving the waiter's
// watch has applied, at or after the event that woke the waiter: state at
// a committed revision is the same on every member that applied it, so
// this needs no round of Raft; a member that has not applied it yet (or
// has compacted it) makes check fall back to a linearizable read.
// Transient failures are retried until ctx ends.
func (d *Driver) check(ctx context.Context, q *lockReq, k keys, myRev, at int64) (checked, error) {
	if at > 0 {
		resps, hdr, err := d.read(ctx, checkOps(q, k, myRev, clientv3.WithRev(at), clientv3.WithSerializable()))
		if err == nil {
			return readCheck(q, myRev, at, hdr, resps), nil
		}
		if ctx.Err() != nil {
			return checked{}, err
		}
	}
	ops := checkOps(q, k, myRev)
	for attempt := 1; ; attempt++ {
		resps, hdr, err := d.read(ctx, ops)
		if err == nil {
			return readCheck(q, myRev, hdr, hdr, resps), nil
		}
		if d.ctx.Err() != nil || !transient(ctx, err) {
			return checked{}, err
		}
		if perr := pause(ctx, d.ctx, attempt); perr != nil {
			return checked{}, err
		}
	}
}

// queueReads bounds the driver's reads of queues in flight. etcd filters
// and sorts a range only after reading all its keys, so a check costs it
// O(queue length), and it finishes reads whose caller gave up: 1000
// waiters checking at once made reads that each ran past RequestTimeout
// and were retried, piling up, until handoffs stopped. Waiting for a turn
// here, out of the request's timeout, each read takes milliseconds.
const queueReads = 2

// read runs ops, all ranges, once a queueReads turn is free, in one
// request bounded by RequestTimeout (a transaction of serializable ranges
// needs no round of Raft); it returns each range's response and the
// header's revision.
func (d *Driver) read(ctx context.Context, ops []clientv3.Op) ([]*clientv3.GetResponse, int64, error) {
	select {
	case d.reads <- struct{}{}:
	case <-ctx.Done():
		return nil, 0, ctx.Err()
	case <-d.ctx.Done():
		return nil, 0, driver.ErrClosed
	}
	defer func() { <-d.reads }()
	ctx, cancel := d.req(ctx)
	defer cancel()
	if len(ops) == 1 {
		resp, err := d.c.Do(ctx, ops[0])
		if err != nil {
			return nil, 0, err
		}
		g := resp.Get()
		return []*clientv3.GetResponse{g}, g.Header.Revision, nil
	}
	resp, err := d.c.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return nil, 0, err
	}
	out := make([]*clientv3.GetResponse, len(resp.Responses))
	for i, rr := range resp.Responses {
		out[i] = (*clientv3.GetResponse)(rr.GetResponseRange())
	}
	return out, resp.Header.Revision, nil
}

// checkOps returns the ranges check reads for q's mode: for a reader, see
// readerOps; otherwise the newest keys of the queue up to the caller's,
// its own first: its own and the one just ahead for the mutex, a writer
// and a candidate; Limit+2 keys for a semaphore, read, not counted,
// because etcd counts a range before it applies revision filters.
func checkOps(q *lockReq, k keys, myRev int64, extra ...clientv3.OpOption) []clientv3.Op {
	if q.Mode == driver.Read {
		return readerOps(k, q.block, myRev, extra)
	}
	n := int64(2)
	if q.Mode == driver.Permit {
		n = int64(q.Limit) + 2
	}
	return []clientv3.Op{clientv3.OpGet(q.queue, newest(n, myRev, extra)...)}
}

// newest returns, with extra, the options of a range over a prefix that
// reads the keys only of the n newest keys created at or before myRev.
func newest(n, myRev int64, extra []clientv3.OpOption) []clientv3.OpOption {
	return append([]clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithMaxCreateRev(myRev),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend), clientv3.WithLimit(n)}, extra...)
}

// readCheck interprets what checkOps read at revision rev (cur: the
// member's revision then).
func readCheck(q *lockReq, myRev, rev, cur int64, resps []*clientv3.GetResponse) checked {
	st := checked{rev: rev, cur: cur}
	if q.Mode == driver.Read {
		return readerCheck(st, myRev, resps)
	}
	kvs := resps[0].Kvs
	if len(kvs) == 0 || kvs[0].CreateRevision != myRev {
		st.gone = true
		return st
	}
	if q.Mode == driver.Permit {
		return permitCheck(st, q, myRev, kvs)
	}
	if len(kvs) > 1 {
		st.t = target{key: string(kvs[1].Key), rev: kvs[1].CreateRevision}
	}
	return st
}
