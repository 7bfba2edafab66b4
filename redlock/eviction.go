package redlock

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/dlockgo/dlock/internal/redisutil"
)

// startEvictionCheck reads every node's maxmemory-policy in the
// background and logs one warning on log naming the nodes that may evict
// lock keys: an evicted key takes that node's vote from the holder without
// its knowing, and enough of them free the lock on a quorum while the
// holder believes it holds it. It runs in the background because a
// redlock driver opens with its nodes unreached (some may be down); a node
// that does not answer within redisutil.CheckTimeout (not the node
// timeout: a first dial and TLS handshake may take longer, and a read that
// gave up would cost the client that connection), or does not let the client
// read its configuration (CONFIG disabled or renamed, an ACL without
// +config), is not checked, which is logged at Debug. Close cancels the
// check and waits for it.
func (d *Driver) startEvictionCheck(log *slog.Logger) {
	ctx, cancel := context.WithCancel(context.Background())
	d.stopCheck = cancel
	d.checking.Add(1)
	go func() {
		defer d.checking.Done()
		defer cancel()
		risky := redisutil.Evicting(ctx, d.clients, redisutil.CheckTimeout, func(addr string, err error) {
			log.Debug("redlock: cannot read a node's maxmemory-policy; whether it may evict lock keys is not checked",
				"node", addr, "err", err)
		})
		if len(risky) > 0 {
			log.Warn(fmt.Sprintf("redlock: %d of %d nodes may evict lock keys: maxmemory-policy is %s; "+
				"an evicted lock key takes that node's vote from its holder unnoticed, and on a quorum frees the lock while the holder still believes it holds it; "+
				"set maxmemory-policy noeviction (CONFIG SET maxmemory-policy noeviction, and in redis.conf) on every node",
				len(risky), len(d.clients), strings.Join(risky, ", ")))
		}
	}()
}
