package natslock

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/dlockgo/dlock/driver"
)

// Inspect lists the locks held in the bucket whose names start with
// prefix, sorted by name (then kind, then permit slot): one entry per
// mutex, leader and permit. It reads every key's last message with one
// watch of the whole bucket, skipping markers and keys the driver does
// not write. Owner is the holder's owner value, Token its token, Expires
// the server's timestamp of the holder's last write plus its TTL (on the
// server's clock), and Waiters -1: waiters leave nothing in the bucket.
func (d *Driver) Inspect(ctx context.Context, prefix string) ([]driver.LockInfo, error) {
	if d.closed.Load() {
		return nil, driver.ErrClosed
	}
	watcher, err := d.kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("natslock: inspect: %w", err)
	}
	defer stopWatch(watcher)
	type listed struct {
		info driver.LockInfo
		slot int
	}
	var all []listed
	for {
		var kve jetstream.KeyValueEntry
		var ok bool
		select {
		case kve, ok = <-watcher.Updates():
		case <-ctx.Done():
			return nil, fmt.Errorf("natslock: inspect: %w", ctx.Err())
		}
		if !ok {
			return nil, fmt.Errorf("natslock: inspect: %w", driver.ErrClosed)
		}
		if kve == nil {
			break
		}
		p, ok := parseKey(kve.Key())
		if !ok || !strings.HasPrefix(p.name, prefix) {
			continue
		}
		e := fromKV(kve)
		if !e.held {
			continue
		}
		all = append(all, listed{slot: p.slot, info: driver.LockInfo{
			Name:    p.name,
			Mode:    p.mode,
			Token:   e.rec.tokenAt(e.rev),
			Owner:   e.rec.owner,
			Expires: e.time.Add(e.rec.ttl),
			Waiters: -1,
		}})
	}
	slices.SortFunc(all, func(a, b listed) int {
		return cmp.Or(strings.Compare(a.info.Name, b.info.Name), cmp.Compare(a.info.Mode, b.info.Mode), cmp.Compare(a.slot, b.slot))
	})
	out := make([]driver.LockInfo, len(all))
	for i, l := range all {
		out[i] = l.info
	}
	return out, nil
}
