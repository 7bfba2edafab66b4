package etcdlock

import (
	"context"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlockgo/dlock/driver"
)

// Probing a fresh watch. etcd registers a new watch at its current
// revision + 1 after reading that revision; a write that lands in between
// leaves the watch "unsynced", and etcd catches unsynced watches up only
// every 100ms, so a deletion in that time reaches the waiter up to 100ms
// late. No start revision avoids it (a later one would drop the very
// event). So until a read proves that no write slipped in, or until
// probeWindow has passed, the waiter also reads its predecessor, cheaply
// (serializable, count only), at probeFirst, then at doubling offsets.
const (
	probeFirst  = 5 * time.Millisecond
	probeWindow = 110 * time.Millisecond
)

// predWatch follows the deletion of one predecessor key.
type predWatch struct {
	key     string // "" when no watch runs
	rev     int64  // the key's create revision: a key of the same name made later is another key
	ch      clientv3.WatchChan
	cancel  context.CancelFunc
	from    int64 // the watch reports deletions after this revision
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
	w.key = ""
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

// wait waits until the caller's key, created at myRev, is the oldest under
// the name. pred is the key just before it, created at predRev and alive
// at revision seen; "" means it must be looked up first.
func (d *Driver) wait(ctx context.Context, s *session, r driver.Request, k keys, myRev int64, pred string, predRev, seen int64) (driver.Grant, error) {
	w := &predWatch{probe: time.NewTimer(time.Hour)}
	w.probe.Stop()
	defer w.stop()
	every := max(s.ttl, time.Second)
	recheck := time.NewTimer(every) // a safety net: a watch is not trusted for ever
	defer recheck.Stop()
	needCheck := pred == ""
	var at int64    // a revision applied where the watch runs, to read at; 0: now
	watchFails := 0 // in a row, for the pause before the next try
	for {
		if needCheck {
			needCheck = false
			st, err := d.check(ctx, k, myRev, at)
			at = 0
			switch {
			case err != nil:
				d.abandon(s, k, false)
				return driver.Grant{}, err
			case st.gone:
				d.free(s, k.slot)
				return driver.Grant{}, fmt.Errorf("%w: key %q", errRequeue, k.key)
			case st.pred == "":
				return d.grant(s, r, k, myRev)
			}
			pred, predRev, seen = st.pred, st.predRev, st.rev
			if w.key == pred && w.rev == predRev && st.cur == w.from {
				w.synced = true // no write since the watch's revision
			}
			recheck.Reset(every)
		}
		if w.key != pred || w.rev != predRev {
			w.stop()
			if !d.watch(ctx, s, w, r.Name, pred, predRev) {
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
			// pred was alive at seen; the watch reports deletions after
			// from. A gap between them is read again.
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
			case hasDelete(wr.Events):
				at = wr.Header.Revision
				d.woke(r.Name, pred)
			}
			needCheck = true
		case <-w.probe.C:
			if rev, gone := d.probe(ctx, w); gone {
				at, needCheck = rev, true
				d.woke(r.Name, pred)
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

// watch starts w on key and waits for etcd to create it; false when the
// watch failed or the wait must stop.
func (d *Driver) watch(ctx context.Context, s *session, w *predWatch, name, key string, rev int64) bool {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	w.key, w.rev, w.cancel, w.synced = key, rev, cancel, false
	w.ch = d.c.Watch(wctx, key, clientv3.WithFilterPut(), clientv3.WithCreatedNotify())
	select {
	case wr, ok := <-w.ch:
		if !ok || !wr.Created || wr.Canceled || wr.Err() != nil {
			w.stop()
			return false
		}
		if d.hooks != nil && d.hooks.watch != nil {
			d.hooks.watch(name, key) // counted once etcd has created it
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

// probe reads whether the watched key still exists with its create
// revision; it returns the revision read when the key is gone.
func (d *Driver) probe(ctx context.Context, w *predWatch) (int64, bool) {
	rctx, cancel := d.req(ctx)
	resp, err := d.c.Get(rctx, w.key, clientv3.WithSerializable(), clientv3.WithKeysOnly())
	cancel()
	if err == nil {
		if len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != w.rev {
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
	if d.hooks != nil && d.hooks.wake != nil {
		d.hooks.wake(name, key)
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

func hasDelete(evs []*clientv3.Event) bool {
	for _, ev := range evs {
		if ev.Type == mvccpb.DELETE {
			return true
		}
	}
	return false
}

// checked is what check read.
type checked struct {
	gone    bool   // the caller's key is gone (its lease expired, or deleted)
	pred    string // the newest key older than the caller's; "" when none
	predRev int64  // pred's create revision
	rev     int64  // the revision read
	cur     int64  // the serving member's revision at the time
}

// check reads, in one request, the caller's key and the newest key
// created before it: the two newest keys with a create revision up to
// myRev. When the caller's key exists with its create revision, its lease
// was alive at the revision read.
//
// With at > 0 the read is serializable, at revision at: a revision the
// member that serves the waiter's watch has applied, at or after the
// event that woke the waiter. State at a committed revision is the same
// on every member that applied it, so this needs no round of Raft; a
// member that has not applied it yet (or has compacted it) makes check
// fall back to a linearizable read. Transient failures are retried until
// ctx ends.
func (d *Driver) check(ctx context.Context, k keys, myRev, at int64) (checked, error) {
	opts := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithMaxCreateRev(myRev),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend), clientv3.WithLimit(2)}
	if at > 0 {
		rctx, cancel := d.req(ctx)
		resp, err := d.c.Get(rctx, k.prefix, append(opts, clientv3.WithRev(at), clientv3.WithSerializable())...)
		cancel()
		if err == nil {
			return readCheck(resp, myRev, at), nil
		}
		if ctx.Err() != nil {
			return checked{}, err
		}
	}
	for attempt := 1; ; attempt++ {
		rctx, cancel := d.req(ctx)
		resp, err := d.c.Get(rctx, k.prefix, opts...)
		cancel()
		if err == nil {
			return readCheck(resp, myRev, resp.Header.Revision), nil
		}
		if d.ctx.Err() != nil || !transient(ctx, err) {
			return checked{}, err
		}
		if perr := pause(ctx, d.ctx, attempt); perr != nil {
			return checked{}, err
		}
	}
}

func readCheck(resp *clientv3.GetResponse, myRev, rev int64) checked {
	st := checked{rev: rev, cur: resp.Header.Revision}
	kvs := resp.Kvs
	if len(kvs) == 0 || kvs[0].CreateRevision != myRev {
		st.gone = true
		return st
	}
	if len(kvs) > 1 {
		st.pred, st.predRev = string(kvs[1].Key), kvs[1].CreateRevision
	}
	return st
}
