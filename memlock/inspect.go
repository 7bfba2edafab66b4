package memlock

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"time"

	"github.com/dlockgo/dlock/driver"
)

// Inspect implements driver.Inspector: it lists the locks of every kind
// in the store whose names start with prefix, one entry per holder (three
// readers give three entries), by name, kind and token, each with the
// holder's owner, token and expiry, and the requests queued for the lock.
// The snapshot is taken under the store's mutex; expired holders are left
// out, without changing the store.
func (d *Driver) Inspect(ctx context.Context, prefix string) ([]driver.LockInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	type found struct {
		kind kind
		info driver.LockInfo
	}
	var out []found
	s := d.s
	now := time.Now()
	s.mu.Lock()
	if d.closed {
		s.mu.Unlock()
		return nil, driver.ErrClosed
	}
	for k, e := range s.locks {
		if !strings.HasPrefix(k.name, prefix) {
			continue
		}
		for _, h := range e.holders {
			if !now.Before(h.expires) {
				continue
			}
			out = append(out, found{k.kind, driver.LockInfo{
				Name: k.name, Mode: h.mode, Token: h.token, Owner: h.owner,
				Expires: h.expires, Waiters: len(e.queue),
			}})
		}
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b found) int {
		return cmp.Or(strings.Compare(a.info.Name, b.info.Name), cmp.Compare(a.kind, b.kind), cmp.Compare(a.info.Token, b.info.Token))
	})
	infos := make([]driver.LockInfo, len(out))
	for i, f := range out {
		infos[i] = f.info
	}
	return infos, nil
}
