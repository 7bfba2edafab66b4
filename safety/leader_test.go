package safety

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/internal/testenv"
)

// TestLeaderStop kills the leader of a 3-member etcd cluster or ZooKeeper
// ensemble of the test's own (for NATS, the leader of the bucket's R3
// stream on a 3-server cluster) right after a grant, keeps it down while a
// new leader takes over, and starts it again. The lock and its holder's
// lease or session must survive the election: no overlap, no regression.
func TestLeaderStop(t *testing.T) {
	const hold = 100 * time.Millisecond
	// wlOf is the workload of every backend: 3 clients on url with ttl.
	wlOf := func(url string, ttl time.Duration) workload {
		return workload{url: url, clients: 3, dur: scale(4*time.Second, 20*time.Second), ttl: ttl, hold: hold, guard: true}
	}
	t.Run("etcd", func(t *testing.T) {
		c := testenv.StartEtcd(t, testenv.EtcdOptions{Members: 3})
		c.WaitLeader(30 * time.Second)
		stops := 0
		wl := wlOf("etcd://"+strings.Join(c.Endpoints(), ",")+"/dlock-safety", 2*time.Second)
		r, _ := run(t, wl, func(ctx context.Context, w *workers) {
			stops = killLeaders(ctx, w, hold, func(ctx context.Context) killable {
				if l := c.Leader(ctx); l != nil {
					return l
				}
				return nil
			})
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
		wl := wlOf("zk://"+strings.Join(c.Addrs(), ",")+"/dlock-safety?session_timeout=4s", 4*time.Second)
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
	t.Run("nats", func(t *testing.T) {
		c := testenv.StartNATS(t, 3)
		js, err := jetstream.New(c.Conn(t))
		if err != nil {
			t.Fatal(err)
		}
		stops := 0
		wl := wlOf("nats://"+c.URL()+"/dlock-safety?replicas=3", 2*time.Second)
		// One Locker first, so that the bucket exists (replicated on
		// the three servers) before the workers open it together.
		pre, err := dlock.Open(context.Background(), wl.url)
		if err != nil {
			t.Fatal(err)
		}
		_ = pre.Close()
		r, _ := run(t, wl, func(ctx context.Context, w *workers) {
			// Every worker looks the bucket up as it opens, which needs
			// the stream's leader: let them all open before the first
			// kill.
			if !sleepCtx(ctx, 1500*time.Millisecond) {
				return
			}
			stops = killLeaders(ctx, w, hold, func(ctx context.Context) killable {
				if l := c.StreamLeader(ctx, js, "KV_dlock-safety"); l != nil {
					return l
				}
				return nil
			})
		})
		report(t, "nats (3 servers, R3 bucket)", "the bucket's stream leader killed after a grant, restarted 2s later", true, 1, r)
		checkLeader(t, r, stops)
	})
}

// A killable is a server a test can kill and start again.
type killable interface {
	Kill()
	Start()
}

// killLeaders kills the server that leader names (nil: none known)
// right after each fresh grant, keeps it down for 2s while another takes
// over, starts it again, and waits a second before the next; it returns
// the number of kills when ctx ends.
func killLeaders(ctx context.Context, w *workers, hold time.Duration, leader func(context.Context) killable) (stops int) {
	for {
		if _, ok := nextFresh(ctx, w, hold); !ok {
			return stops
		}
		lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		l := leader(lctx)
		cancel()
		if l == nil {
			continue
		}
		l.Kill()
		stops++
		time.Sleep(2 * time.Second)
		l.Start()
		if !sleepCtx(ctx, time.Second) {
			return stops
		}
	}
}

func checkLeader(t *testing.T, r Result, stops int) {
	t.Helper()
	if stops == 0 {
		t.Error("no leader was stopped")
	}
	wantZero(t, r.Regressions, "token regressions")
	wantZero(t, r.Unnoticed, "overlaps neither holder was told of")
}
