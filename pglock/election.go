package pglock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
)

// An election is an advisory lock of its own (ModeKey with driver.Leader)
// taken with pg_advisory_lock, so candidates are elected in the order they
// asked. Taking it writes the leader's value, token and session pid in the
// election's token row ("leader#" + name) and notifies its channel, in one
// transaction. Resigning unlocks and notifies.

// Leader implements driver.Elector: it reads the election's row, and
// returns its value and token if the session the row names still holds
// the election's lock (in pg_locks); the zero LeaderInfo otherwise.
func (d *Driver) Leader(ctx context.Context, name string) (driver.LeaderInfo, error) {
	if err := dlock.ValidateName(name); err != nil {
		return driver.LeaderInfo{}, err
	}
	k := ModeKey(d.st.table, driver.Leader, name, 0)
	var info driver.LeaderInfo
	err := d.withConn(ctx, func(c *conn) error {
		var tok int64
		var value string
		switch err := c.pg.QueryRow(ctx, d.st.leader, k, rowName(driver.Leader, name)).Scan(&tok, &value); {
		case err == nil:
			info = driver.LeaderInfo{Value: value, Token: uint64(tok)}
		case !errors.Is(err, pgx.ErrNoRows):
			return err
		}
		return nil
	}, func(err error) error { return fmt.Errorf("pglock: leader of %q: %w", name, err) })
	return info, err
}

// Observe implements driver.Elector. It LISTENs on the election's channel
// before it reads the leader, and reads it again after each notification;
// while someone leads, it also waits on the server, on a connection of its
// own, for the election's lock to become free, so that a leader whose
// session dies is seen without polling. A reader that falls behind finds
// the latest leader, never one it just received. A failed read is retried
// after a back-off (50ms, doubling up to 2s). The channel is closed when
// ctx ends or the driver closes. See Election in docs/POSTGRES.md.
func (d *Driver) Observe(ctx context.Context, name string) (<-chan driver.LeaderInfo, error) {
	if err := dlock.ValidateName(name); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s, err := d.subscribe(ctx, channelName(d.st.table, "leader", name))
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		d.unsubscribe(s)
		return nil, errClosed
	}
	d.observers.Add(1)
	d.mu.Unlock()
	out := make(chan driver.LeaderInfo, 1)
	go d.observe(ctx, name, s, out)
	return out, nil
}

// observe is an observer's goroutine.
func (d *Driver) observe(ctx context.Context, name string, s *sub, out chan driver.LeaderInfo) {
	defer d.observers.Done()
	defer close(out)
	defer d.unsubscribe(s)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(d.life, cancel)()

	k := ModeKey(d.st.table, driver.Leader, name, 0)
	var o offer
	var watch chan error // the death watch's result, while one runs
	defer func() {
		if watch != nil {
			cancel()
			<-watch
		}
	}()
	var retryC <-chan time.Time
	delay := minRedial
	// backOff arms the retry for delay from now, and doubles delay.
	backOff := func() {
		retryC = time.After(delay)
		delay = min(2*delay, maxRedial)
	}
	for {
		info, err := d.Leader(ctx, name)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			backOff() // try again later, or at the next notification
		default:
			o.send(out, info)
			if info.Token != 0 && watch == nil && retryC == nil {
				watch = make(chan error, 1)
				go func(w chan<- error) { w <- d.awaitFree(ctx, k) }(watch)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-s.wake:
		case err := <-watch:
			watch = nil
			if err != nil && ctx.Err() == nil {
				backOff() // not another at once: wait for a notification or the back-off
				continue
			}
		case <-retryC:
			retryC = nil
			continue
		}
		if retryC == nil {
			delay = minRedial
		}
	}
}

// awaitFree waits on the server until key k is free, and lets it go.
func (d *Driver) awaitFree(ctx context.Context, k int64) error {
	c, _, err := d.get(ctx)
	if err != nil {
		return err
	}
	p := plan{sql: d.st.awaitFree, args: []any{k}, free: true}
	_, _, err = d.take(ctx, c, &p, true, nil)
	if err == nil && !c.cancelSent() {
		d.put(c)
		return nil
	}
	c.close()
	if err == nil {
		err = ctx.Err()
	}
	return err
}

// offer records what an observer sent, never to send a leader twice in a row.
type offer struct {
	pending   bool // the last value put may still be in the channel
	last      driver.LeaderInfo
	delivered driver.LeaderInfo // the last value the reader took
	known     bool              // delivered is set
}

// send puts info in out (capacity 1), replacing a value not taken yet.
func (o *offer) send(out chan driver.LeaderInfo, info driver.LeaderInfo) {
	if o.pending {
		select {
		case <-out: // never read: the reader last saw o.delivered
		default:
			o.delivered, o.known = o.last, true
		}
		o.pending = false
	}
	if o.known && info == o.delivered {
		return
	}
	out <- info
	o.last, o.pending = info, true
}
