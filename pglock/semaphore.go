package pglock

import (
	"context"
	"errors"
	"time"

	"github.com/dlockgo/dlock/driver"
)

// lockPermit waits for a permit of semaphore r.Name: the semaphore's
// limit slots are advisory keys, and a holder holds one.
//
// It first listens on the semaphore's channel (on the driver's shared
// listening connection), then loops: a try takes the first free slot, in
// one statement; when all are held, it blocks on the server on the slot
// with the fewest waiting requests, until either that slot is granted to
// it (its holder released it or its session ended) or a notification
// comes on the channel. A release notifies the channel only when the slot
// it frees is then free, that is when no waiter blocked on that slot took
// it over; the notified waiters give up their blocked requests and try
// again.
//
// So a release reaches a waiter without polling, and so does a crash,
// provided a waiter is blocked on the crashed holder's slot: waiters
// spread over the slots, and with at least limit waiters every slot has
// one. A permit freed by a crash on a slot nobody blocks on is taken by
// the next try: a new acquisition, the waiters woken by the next release,
// or, at the latest, a waiter's own try again once it has been blocked for
// the request's TTL (the time within which a crashed holder's lock frees
// itself on the TTL backends): so a lone waiter whose try came just
// before the crashed holder's session ended on the server, and which then
// blocked on another holder's slot, still gets the permit.
func (d *Driver) lockPermit(ctx context.Context, r driver.Request) (driver.Grant, error) {
	ch := channelName(d.st.table, r.Mode, r.Name)
	sub, err := d.subscribe(ctx, ch)
	if err != nil {
		return driver.Grant{}, err
	}
	defer d.unsubscribe(sub)
	keys := permitKeys(d.st.table, r.Name, r.Limit)
	row := rowName(r.Mode, r.Name)
	for {
		// Anything notified so far is seen by this try.
		select {
		case <-sub.wake:
		default:
		}
		g, err := d.tryPermit(ctx, r)
		if err == nil || !errors.Is(err, driver.ErrNotAcquired) {
			return g, err
		}
		slot, err := d.pickSlot(ctx, keys)
		if err != nil {
			return driver.Grant{}, err
		}
		p := plan{sql: d.st.lock, args: []any{slot, row}, key: slot, unlock: d.st.unlockPermit, channel: ch}
		again := time.AfterFunc(max(r.TTL, time.Second), sub.poke)
		g, err = d.run(ctx, r, p, true, sub.wake)
		again.Stop()
		if !errors.Is(err, errWoken) {
			// Taken, or failed (a server-side timeout ends the wait with
			// ErrNotAcquired).
			return g, err
		}
	}
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
