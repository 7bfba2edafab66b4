package redlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock/internal/redisutil"
)

// startEvictionCheck reads every node's maxmemory-policy in the
// background and logs one warning on log naming the nodes that may evict
// lock keys: an evicted key takes that node's vote from the holder without
// its knowing, and enough of them free the lock on a quorum while the
// holder believes it holds it. It runs in the background because a
// redlock driver opens with its nodes unreached (some may be down); a node
// that does not answer within the node timeout, or does not let the client
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
		var (
			mu    sync.Mutex
			found = make([]string, len(d.clients)) // "<policy> on <addr>", by node, for a stable order
			wg    sync.WaitGroup
		)
		for i, c := range d.clients {
			wg.Go(func() {
				addr := nodeAddr(i, c)
				nctx, ncancel := context.WithTimeout(ctx, d.nodeTimeout)
				p, evicts, err := redisutil.EvictionPolicy(nctx, c)
				ncancel()
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err != nil && errors.Is(ctx.Err(), context.Canceled):
					// Close ended the check: nothing to report.
				case err != nil:
					log.Debug("redlock: cannot read a node's maxmemory-policy; whether it may evict lock keys is not checked",
						"node", addr, "err", err)
				case evicts:
					found[i] = p + " on " + addr
				}
			})
		}
		wg.Wait()
		var risky []string
		for _, f := range found {
			if f != "" {
				risky = append(risky, f)
			}
		}
		if len(risky) > 0 {
			log.Warn(fmt.Sprintf("redlock: %d of %d nodes may evict lock keys: maxmemory-policy is %s; "+
				"an evicted lock key takes that node's vote from its holder unnoticed, and on a quorum frees the lock while the holder still believes it holds it; "+
				"set maxmemory-policy noeviction (CONFIG SET maxmemory-policy noeviction, and in redis.conf) on every node",
				len(risky), len(d.clients), strings.Join(risky, ", ")))
		}
	}()
}

// nodeAddr names node i for the log: its address when the client is a
// *redis.Client.
func nodeAddr(i int, c redis.UniversalClient) string {
	if rc, ok := c.(*redis.Client); ok {
		return rc.Options().Addr
	}
	return fmt.Sprintf("node %d", i)
}
