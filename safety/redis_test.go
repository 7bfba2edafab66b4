package safety

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/safety/internal/faultproxy"
)

// sleepCtx sleeps for d or until ctx ends, and reports whether it slept
// the whole time.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// nextFresh waits for a section that has just started and returns its
// holder; ok is false when the run ends first.
func nextFresh(ctx context.Context, w *workers, hold time.Duration) (enter, bool) {
	for {
		select {
		case <-ctx.Done():
			return enter{}, false
		case e := <-w.enters:
			if fresh(e, hold) {
				return e, true
			}
		}
	}
}

// proxy starts a fault proxy to target, closed when t ends.
func proxy(t *testing.T, target string) *faultproxy.Proxy {
	t.Helper()
	p, err := faultproxy.Start(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// replicate makes replica a replica of the server at addr and waits until
// it is in sync.
func replicate(t *testing.T, primary *testenv.RedisServer, replica *testenv.RedisServer, addr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Send the first full copy at once rather than after the default 5s.
	if err := primary.Client().ConfigSet(ctx, "repl-diskless-sync-delay", "0").Err(); err != nil {
		t.Fatal(err)
	}
	host, port, _ := strings.Cut(addr, ":")
	c := replica.Client()
	if err := c.Do(ctx, "REPLICAOF", host, port).Err(); err != nil {
		t.Fatal(err)
	}
	for {
		info, err := c.Info(ctx, "replication").Result()
		if err == nil && strings.Contains(info, "master_link_status:up") {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("the replica did not sync: %v\n%s", err, info)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// redisClientParams make the workers' clients give up on a dead server
// quickly, as a failover wants.
const redisClientParams = "dial_timeout=200ms&read_timeout=1s&write_timeout=1s"

// TestFailover is the seed's failover race: a primary with one replica,
// the primary killed right after a grant, the replica promoted (REPLICAOF
// NO ONE) and the clients moved to it. The replication link runs through a
// fault proxy that delays it a little (as a loaded network would), so that
// the grant has not reached the replica yet. Without WAIT the promoted
// replica hands the lock out again (double grants, token regressions);
// with WaitReplicas 1 a grant returns only once the replica has it.
func TestFailover(t *testing.T) {
	for _, waitReplicas := range []int{0, 1} {
		fault := "failover: primary killed after a grant, replica promoted"
		if waitReplicas > 0 {
			fault += fmt.Sprintf(", WaitReplicas %d", waitReplicas)
		}
		t.Run(fmt.Sprintf("wait_replicas=%d", waitReplicas), func(t *testing.T) {
			rounds := scale(1, 6)
			var total Result
			for range rounds {
				total = total.Add(failoverRound(t, waitReplicas))
			}
			report(t, "redis (primary + replica)", fault, true, rounds, total)
		})
	}
}

func failoverRound(t *testing.T, waitReplicas int) Result {
	t.Helper()
	primary := testenv.StartRedis(t, testenv.RedisOptions{})
	replica := testenv.StartRedis(t, testenv.RedisOptions{})
	defer primary.Kill()
	defer replica.Kill()
	link := proxy(t, primary.Addr)
	defer link.Close()
	replicate(t, primary, replica, link.Addr)
	link.SetDelay(30 * time.Millisecond)
	front := proxy(t, primary.Addr)
	defer front.Close()

	// Sections outlast the TTL (renewal keeps them), so that a holder
	// whose grant the promoted replica never got is still working when
	// the lock is handed out again.
	const ttl, hold = 500 * time.Millisecond, 750 * time.Millisecond
	url := "redis://" + front.Addr + "?" + redisClientParams
	if waitReplicas > 0 {
		url += fmt.Sprintf("&wait_replicas=%d&wait_timeout=500ms", waitReplicas)
	}
	wl := workload{url: url, clients: 3, dur: scale(3*time.Second, 5*time.Second), ttl: ttl, hold: hold, guard: true}
	killed := false
	r, _ := run(t, wl, func(ctx context.Context, w *workers) {
		if !sleepCtx(ctx, wl.dur/3) {
			return
		}
		// Right after a grant: before the delayed link carried it.
		if _, ok := nextFresh(ctx, w, 30*time.Millisecond); !ok {
			return
		}
		primary.Kill()
		if err := replica.Client().Do(ctx, "REPLICAOF", "NO", "ONE").Err(); err != nil {
			t.Errorf("promote the replica: %v", err)
			return
		}
		front.SetTarget(replica.Addr)
		front.Cut()
		killed = true
	})
	if !killed {
		t.Error("the run ended before the failover")
	}
	return r
}
