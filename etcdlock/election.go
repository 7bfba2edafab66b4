package etcdlock

import (
	"context"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlockgo/dlock/driver"
)

// Elections. Candidates queue under <Prefix>/#elect/<name>/# as a mutex's
// contenders do (Campaign is Lock, resigning is Unlock), but a key holds
// the candidate's Request.Value: the oldest key leads, and its value and
// create revision (the token) are what Leader and Observe report.

// Leader implements driver.Elector: one read of the oldest key of the
// election.
func (d *Driver) Leader(ctx context.Context, name string) (driver.LeaderInfo, error) {
	if d.isClosed() {
		return driver.LeaderInfo{}, driver.ErrClosed
	}
	info, _, _, err := d.leader(ctx, d.f.queue(driver.Leader, name), 0)
	return info, err
}

// leader reads, in one request bounded by RequestTimeout, the oldest key
// under prefix at revision rev (0: now), and returns its leader, the key,
// and the revision read.
func (d *Driver) leader(ctx context.Context, prefix string, rev int64) (driver.LeaderInfo, string, int64, error) {
	opts := clientv3.WithFirstCreate()
	if rev > 0 {
		opts = append(opts, clientv3.WithRev(rev))
	}
	rctx, cancel := d.req(ctx)
	defer cancel()
	resp, err := d.c.Get(rctx, prefix, opts...)
	if err != nil {
		return driver.LeaderInfo{}, "", 0, fmt.Errorf("etcdlock: read the leader: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return driver.LeaderInfo{}, "", resp.Header.Revision, nil
	}
	kv := resp.Kvs[0]
	return driver.LeaderInfo{Value: string(kv.Value), Token: uint64(kv.CreateRevision)}, string(kv.Key), resp.Header.Revision, nil
}

// Observe implements driver.Elector. One goroutine per call reads the
// leader, then watches the election's prefix, reading the leader again
// only on an event that can change it. The channel is unbuffered: a reader
// that falls behind gets the latest leader. The goroutine ends, closing
// the channel, when ctx ends or the driver closes.
func (d *Driver) Observe(ctx context.Context, name string) (<-chan driver.LeaderInfo, error) {
	prefix := d.f.queue(driver.Leader, name)
	first, key, rev, err := d.leader(ctx, prefix, 0)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil, driver.ErrClosed
	}
	d.wg.Add(1)
	d.mu.Unlock()
	ch := make(chan driver.LeaderInfo)
	go func() {
		defer d.wg.Done()
		defer close(ch)
		o := &observer{d: d, prefix: prefix, cur: first, key: key, rev: rev, out: ch, pending: true}
		o.run(ctx)
	}()
	return ch, nil
}

// observer follows the leader of one election for Observe.
type observer struct {
	d       *Driver
	prefix  string
	out     chan<- driver.LeaderInfo
	cur     driver.LeaderInfo // the leader as of rev
	key     string            // cur's key; "" when nobody leads
	rev     int64             // the revision cur was read at; 0: read it anew
	sent    driver.LeaderInfo // the last value sent
	pending bool              // cur is yet to be sent
}

// run sends the leader until ctx or the driver ends.
func (o *observer) run(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(o.d.ctx, cancel)
	defer stop()
	for fails := 0; ctx.Err() == nil; {
		if o.rev == 0 {
			if info, key, rev, err := o.d.leader(ctx, o.prefix, 0); err == nil {
				o.set(info, key)
				o.rev = rev
			}
		}
		if o.rev != 0 && o.follow(ctx) {
			fails = 0
		}
		fails++
		if pause(ctx, o.d.ctx, fails) != nil {
			return
		}
	}
}

// set makes info, whose key is key, the current leader.
func (o *observer) set(info driver.LeaderInfo, key string) {
	o.cur, o.key = info, key
	o.pending = o.cur != o.sent
}

// follow watches the election from o.rev + 1 and sends each change until
// ctx ends or the watch breaks; it reports whether any event came.
func (o *observer) follow(ctx context.Context) bool {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	wch := o.d.c.Watch(wctx, o.prefix, clientv3.WithPrefix(), clientv3.WithRev(o.rev+1))
	got := false
	for {
		var send chan<- driver.LeaderInfo
		if o.pending {
			send = o.out
		}
		select {
		case send <- o.cur:
			o.sent, o.pending = o.cur, false
		case <-ctx.Done():
			return got
		case wr, ok := <-wch:
			if !ok || wr.Canceled || wr.Err() != nil {
				if errors.Is(wr.Err(), rpctypes.ErrCompacted) {
					o.rev = 0 // history is gone: read the leader anew
				}
				return got
			}
			got = true
			if o.changed(wr.Events) {
				// Read at the event's revision, so that the watch goes on
				// from where the read saw the election.
				info, key, _, err := o.d.leader(ctx, o.prefix, wr.Header.Revision)
				if err != nil {
					o.rev = 0
					return got
				}
				o.set(info, key)
			}
			o.rev = wr.Header.Revision
		}
	}
}

// changed applies evs to the current leader where they tell all (a new
// value on the leader's key), and reports whether the leader must be read
// again: its key was deleted, or a key was put while nobody led.
func (o *observer) changed(evs []*clientv3.Event) bool {
	reread := false
	for _, ev := range evs {
		switch {
		case ev.Type == mvccpb.DELETE && string(ev.Kv.Key) == o.key,
			ev.Type == mvccpb.PUT && o.key == "":
			reread = true
		case ev.Type == mvccpb.PUT && string(ev.Kv.Key) == o.key:
			if ev.Kv.CreateRevision != int64(o.cur.Token) {
				reread = true // deleted and made again
			} else if !reread {
				o.set(driver.LeaderInfo{Value: string(ev.Kv.Value), Token: o.cur.Token}, o.key)
			}
		}
	}
	return reread
}
