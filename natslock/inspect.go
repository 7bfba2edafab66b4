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
// mutex, leader and permit, read from the bucket stream's leader. Expires
// is the holder's last write plus its TTL, on the server's clock, and
// Waiters -1. See docs/CLI.md, dlock status.
func (d *Driver) Inspect(ctx context.Context, prefix string) ([]driver.LockInfo, error) {
	if d.closed.Load() {
		return nil, driver.ErrClosed
	}
	rctx, cancel := d.reqCtx(ctx)
	info, err := d.stream.Info(rctx, jetstream.WithSubjectFilter(d.subjects+">"))
	cancel()
	if err != nil {
		return nil, fmt.Errorf("natslock: inspect: %w", err)
	}
	type listed struct {
		info driver.LockInfo
		slot int
	}
	var all []listed
	for subject := range info.State.Subjects {
		key := strings.TrimPrefix(subject, d.subjects)
		p, ok := parseKey(key)
		if !ok || !strings.HasPrefix(p.name, prefix) {
			continue
		}
		e, err := d.get(ctx, key)
		if err != nil {
			return nil, fmt.Errorf("natslock: inspect: read %s: %w", key, err)
		}
		if !e.held {
			continue
		}
		all = append(all, listed{slot: p.slot, info: driver.LockInfo{
			Name:    p.name,
			Mode:    p.mode,
			Token:   e.token(),
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
