package zklock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/dlockgo/dlock/driver"
)

// An election is a mutex under <prefix>/#elect/<name> whose nodes carry
// the candidate's value as data; the lowest node leads. That data is set
// at creation and changes only in the transaction that deletes the node,
// so a reader never sees it half-way.

// Leader implements driver.Elector: it reads the lowest candidate node of
// the election and its data, after a sync (see sync), so that what it
// returns is at least as recent as every change made before it was
// called, by any client (see docs/ZOOKEEPER.md). Three round trips when
// someone leads.
func (d *Driver) Leader(ctx context.Context, name string) (driver.LeaderInfo, error) {
	_, info, _, err := d.syncedLeader(ctx, d.dir(driver.Leader, name), false)
	return info, err
}

// syncedLeader reads the leader of the election whose znode is dir with
// readLeader, after a sync, on the driver's session, which it returns.
// What the call sets is read only once it returned (see watchCtx).
func (d *Driver) syncedLeader(ctx context.Context, dir string, watch bool) (*session, driver.LeaderInfo, <-chan zk.Event, error) {
	s, err := d.ready(ctx)
	if err != nil {
		return nil, driver.LeaderInfo{}, nil, err
	}
	var r struct { // one allocation for what the call's closure sets
		info driver.LeaderInfo
		ev   <-chan zk.Event
	}
	err = d.call(ctx, func() (err error) {
		if err := d.sync(s, dir); err != nil {
			return err
		}
		r.info, r.ev, err = d.readLeader(s, dir, watch)
		return err
	})
	if err != nil {
		return nil, driver.LeaderInfo{}, nil, err
	}
	return s, r.info, r.ev, nil
}

// sync makes the session's server catch up with every write committed
// before the call, by any client, so that the session's later reads see
// them.
//
// ZooKeeper's own sync does not do that on the leader: there it is
// answered like a read, possibly before the leader applied a write that it
// committed and that a follower already applied and acknowledged to its
// client. So sync sends a transaction that changes nothing, a multi-op
// checking that p exists (any version): the leader orders it after every
// committed write, and the session's server answers it, and the later
// reads, only once it applied them all. A check that fails because p does
// not exist is a transaction all the same.
func (d *Driver) sync(s *session, p string) error {
	err := s.do(func() error {
		_, err := s.conn.Multi(&zk.CheckVersionRequest{Path: p, Version: -1})
		return err
	})
	if err != nil && !errors.Is(err, zk.ErrNoNode) {
		return fmt.Errorf("zklock: sync %s: %w", p, err)
	}
	return nil
}

// readLeader reads the leader of the election whose znode is dir. With
// watch set it also returns a watch that fires when the leader may have
// changed: a data watch on the leader's node, or when nobody leads a child
// watch on dir (an exists watch when dir does not exist). Watching the
// leader's node spares observers the arrivals of candidates, which queue
// behind it: only its going can change who leads.
func (d *Driver) readLeader(s *session, dir string, watch bool) (driver.LeaderInfo, <-chan zk.Event, error) {
	for {
		var (
			names []string
			ev    <-chan zk.Event
			gone  bool
		)
		err := s.do(func() (err error) {
			names, _, err = s.conn.Children(dir)
			if errors.Is(err, zk.ErrNoNode) {
				gone, err = true, nil
			}
			return err
		})
		if err != nil {
			return driver.LeaderInfo{}, nil, fmt.Errorf("zklock: list %s: %w", dir, err)
		}
		locks := d.format.queueOf(names, driver.Leader)
		if len(locks) == 0 {
			if !watch {
				return driver.LeaderInfo{}, nil, nil
			}
			// Nobody leads: wait for the first candidate. Listing again
			// with the watch closes the gap since the first listing.
			if gone {
				var ok bool
				err = s.do(func() (err error) {
					ok, _, ev, err = s.conn.ExistsW(dir)
					return err
				})
				if err != nil {
					return driver.LeaderInfo{}, nil, fmt.Errorf("zklock: watch %s: %w", dir, err)
				}
				if !ok {
					return driver.LeaderInfo{}, ev, nil
				}
			}
			err = s.do(func() (err error) {
				names, _, ev, err = s.conn.ChildrenW(dir)
				return err
			})
			if errors.Is(err, zk.ErrNoNode) {
				continue
			}
			if err != nil {
				return driver.LeaderInfo{}, nil, fmt.Errorf("zklock: watch %s: %w", dir, err)
			}
			if locks = d.format.queueOf(names, driver.Leader); len(locks) == 0 {
				return driver.LeaderInfo{}, ev, nil
			}
			// A candidate came meanwhile: watch it instead. The child
			// watch fires once more, later, for nothing.
		}
		var (
			data []byte
			st   *zk.Stat
		)
		p := dir + "/" + locks[0].name
		err = s.do(func() (err error) {
			if watch {
				data, st, ev, err = s.conn.GetW(p)
			} else {
				data, st, err = s.conn.Get(p)
			}
			return err
		})
		if errors.Is(err, zk.ErrNoNode) {
			continue // it resigned meanwhile
		}
		if err != nil {
			return driver.LeaderInfo{}, nil, fmt.Errorf("zklock: read %s: %w", p, err)
		}
		return driver.LeaderInfo{Value: string(data), Token: uint64(st.Czxid)}, ev, nil
	}
}

// Observe implements driver.Elector. Its first value is read after a sync,
// as Leader's. One goroutine per observer reads the leader, sets a watch
// that fires when it may change (see readLeader), and reads it again when
// it fires. When the driver's session ends, the observer goes on with the
// next one; it stops, and closes the channel, when ctx ends or the driver
// closes.
func (d *Driver) Observe(ctx context.Context, name string) (<-chan driver.LeaderInfo, error) {
	dir := d.dir(driver.Leader, name)
	s, info, ev, err := d.syncedLeader(ctx, dir, true)
	if err != nil {
		return nil, err
	}
	ch := make(chan driver.LeaderInfo)
	d.bg.Go(func() { d.observe(ctx, s, dir, info, ev, ch) })
	return ch, nil
}

// observe follows the election until ctx ends or the driver closes. It
// offers the latest leader on the unbuffered ch, replacing one the reader
// has not taken yet, so that a slow reader gets the latest and never the
// same value twice in a row.
func (d *Driver) observe(ctx context.Context, s *session, dir string, cur driver.LeaderInfo, ev <-chan zk.Event, ch chan<- driver.LeaderInfo) {
	defer close(ch)
	var (
		sent    driver.LeaderInfo // the last value the reader took
		first   = true            // the reader took nothing yet
		pending = true            // cur is to be sent
		pause   = 10 * time.Millisecond
	)
	// backoff logs err and waits, longer each time, before the next try;
	// false if ctx ended meanwhile.
	backoff := func(msg string, err error) bool {
		d.opt.Logger.Warn(msg, "election", dir, "error", err)
		if !sleep(pause, ctx.Done()) {
			return false
		}
		pause = min(2*pause, time.Second)
		return true
	}
	for {
		var out chan<- driver.LeaderInfo
		if pending {
			out = ch
		}
		select {
		case out <- cur:
			sent, first, pending = cur, false, false
			continue
		case <-ctx.Done():
			return
		case <-ev:
		case <-s.done:
		}
		// Read again, on a new session if this one ended.
		for {
			if ctx.Err() != nil {
				return
			}
			if s.ended() {
				next, err := d.ready(ctx)
				if err != nil {
					if errors.Is(err, driver.ErrClosed) || !backoff("zklock: observer cannot open a session", err) {
						return
					}
					continue
				}
				s = next
			}
			var (
				info driver.LeaderInfo
				w    <-chan zk.Event
			)
			err := d.call(ctx, func() (err error) {
				info, w, err = d.readLeader(s, dir, true)
				return err
			})
			if ctx.Err() != nil {
				return
			}
			if err == nil {
				cur, ev, pause = info, w, 10*time.Millisecond
				break
			}
			// Unless the session ended, not a connection loss (do retries
			// those): an error the server gave.
			if !s.ended() && !backoff("zklock: observer cannot read the leader", err) {
				return
			}
		}
		// The first value goes out whatever it is; later ones only when
		// they differ from the last one the reader took.
		pending = first || cur != sent
	}
}
