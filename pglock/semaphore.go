package pglock

import (
	"context"
	"errors"
	"time"

	"github.com/dlockgo/dlock/driver"
)

// lockPermit waits for a permit of semaphore q.name, whose limit slots
// are advisory keys; a holder holds one. It listens on the semaphore's
// channel (on the driver's listener), then loops: a try takes the first
// free slot; when all are held, it blocks on the server on the slot with
// the fewest waiters until that slot is granted to it or the channel is
// notified, and at the latest after the request's TTL (so a permit a crash
// frees on a slot nobody blocks on still reaches a lone waiter). See
// Semaphore in docs/POSTGRES.md for why no release or crash is missed.
func (d *Driver) lockPermit(ctx context.Context, q *lockReq) (driver.Grant, error) {
	sub, err := d.subscribe(ctx, q.channel)
	if err != nil {
		return driver.Grant{}, err
	}
	defer d.unsubscribe(sub)
	for {
		// Anything notified so far is seen by this try.
		select {
		case <-sub.wake:
		default:
		}
		g, err := d.tryPermit(ctx, q)
		if err == nil || !errors.Is(err, driver.ErrNotAcquired) {
			return g, err
		}
		slot, err := d.pickSlot(ctx, q.slots)
		if err != nil {
			return driver.Grant{}, err
		}
		p := plan{sql: d.st.lock, args: []any{slot, q.row}, key: slot, unlock: d.st.unlockPermit, channel: q.channel}
		again := time.AfterFunc(max(q.ttl, time.Second), sub.poke)
		g, err = d.run(ctx, q, p, true, sub.wake)
		again.Stop()
		if !errors.Is(err, errWoken) {
			return g, err // taken, or failed (a server-side timeout: ErrNotAcquired)
		}
	}
}

// tryPermit takes the first free slot of semaphore q.name.
func (d *Driver) tryPermit(ctx context.Context, q *lockReq) (driver.Grant, error) {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return driver.Grant{}, errClosed
	}
	free := make([]int64, 0, len(q.slots))
	for _, k := range q.slots {
		if ks := d.keys[k]; ks == nil || ks.n == 0 {
			free = append(free, k)
		}
	}
	d.mu.Unlock()
	if len(free) == 0 {
		return driver.Grant{}, &driver.HeldError{Name: q.name}
	}
	p := plan{sql: d.st.tryPermit, args: []any{free, q.row}, permit: true, unlock: d.st.unlockPermit, channel: q.channel}
	return d.tryOn(ctx, q, p, free)
}

// pickSlot returns the slot key among keys with the fewest waiters.
func (d *Driver) pickSlot(ctx context.Context, keys []int64) (int64, error) {
	c, _, err := d.get(ctx)
	if err != nil {
		return 0, err
	}
	c.begin(false)
	var k int64
	if err := c.pg.QueryRow(ctx, d.st.pickSlot, keys).Scan(&k); err != nil {
		c.close()
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		return 0, err
	}
	d.put(c)
	return k, nil
}
