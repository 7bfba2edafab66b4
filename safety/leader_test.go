package safety

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/dlockgo/dlock/internal/testenv"
)

// TestLeaderStop kills the leader of a 3-member etcd cluster or ZooKeeper
// ensemble of the test's own right after a grant, keeps it down while a
// new leader takes over, and starts it again. The lock and its holder's
// lease or session must survive the election: no overlap, no regression.
func TestLeaderStop(t *testing.T) {
	const hold = 100 * time.Millisecond
	t.Run("etcd", func(t *testing.T) {
		c := testenv.StartEtcd(t, testenv.EtcdOptions{Members: 3})
		c.WaitLeader(30 * time.Second)
		stops := 0
		wl := workload{
			url:     "etcd://" + strings.Join(c.Endpoints(), ",") + "/dlock-safety",
			clients: 3,
			dur:     scale(4*time.Second, 20*time.Second),
			ttl:     2 * time.Second,
			hold:    hold,
			guard:   true,
		}
		r, _ := run(t, wl, func(ctx context.Context, w *workers) {
			for {
				if _, ok := nextFresh(ctx, w, hold); !ok {
					return
				}
				lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				l := c.Leader(lctx)
				cancel()
				if l == nil {
					continue
				}
				l.Kill()
				stops++
				time.Sleep(2 * time.Second)
				l.Start()
				if !sleepCtx(ctx, time.Second) {
					return
				}
			}
		})
		report(t, "etcd (3 members)", "leader killed after a grant, restarted 2s later", true, 1, r)
		checkLeader(t, r, stops)
	})
	t.Run("zookeeper", func(t *testing.T) {
		c := testenv.StartZK(t, 3)
		if err := c.WaitServing(60 * time.Second); err != nil {
			t.Fatal(err)
		}
		stops := 0
		wl := workload{
			url:     "zk://" + strings.Join(c.Addrs(), ",") + "/dlock-safety?session_timeout=4s",
			clients: 3,
			dur:     scale(4*time.Second, 20*time.Second),
			ttl:     4 * time.Second,
			hold:    hold,
			guard:   true,
		}
		r, _ := run(t, wl, func(ctx context.Context, w *workers) {
			for {
				if _, ok := nextFresh(ctx, w, hold); !ok {
					return
				}
				l := c.Leader()
				if l == nil {
					continue
				}
				l.Stop()
				stops++
				time.Sleep(2 * time.Second)
				if err := l.Start(); err != nil {
					t.Errorf("restart %s: %v", l.Addr, err)
					return
				}
				if !sleepCtx(ctx, time.Second) {
					return
				}
			}
		})
		report(t, "zookeeper (3 servers)", "leader killed after a grant, restarted 2s later", true, 1, r)
		checkLeader(t, r, stops)
	})
}

func checkLeader(t *testing.T, r Result, stops int) {
	t.Helper()
	if stops == 0 {
		t.Error("no leader was stopped")
	}
	if r.Regressions != 0 {
		t.Errorf("%d token regressions", r.Regressions)
	}
	if r.Unnoticed != 0 {
		t.Errorf("%d overlaps neither holder was told of", r.Unnoticed)
	}
}
