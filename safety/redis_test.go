package safety

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock"
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

// grantAfter waits d and then for a section that has just started (a
// grant within the last 30 ms); it is false when the run ends first.
func grantAfter(ctx context.Context, w *workers, d time.Duration) bool {
	if !sleepCtx(ctx, d) {
		return false
	}
	_, ok := nextFresh(ctx, w, 30*time.Millisecond)
	return ok
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
	url += fmt.Sprintf("&wait_replicas=%d&wait_timeout=500ms", waitReplicas) // 0: off, not the default
	wl := workload{url: url, clients: 3, dur: scale(3*time.Second, 5*time.Second), ttl: ttl, hold: hold, guard: true}
	killed := false
	r, _ := run(t, wl, func(ctx context.Context, w *workers) {
		// Right after a grant: before the delayed link carried it.
		if !grantAfter(ctx, w, wl.dur/3) {
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

// resumedAfter returns how long after at the first critical section of w
// began, or -1 when none did.
func resumedAfter(w *workers, at time.Time) time.Duration {
	best := time.Duration(-1)
	for _, a := range w.acqs {
		if d := time.Duration(a.Enter - at.UnixNano()); d >= 0 && (best < 0 || d < best) {
			best = d
		}
	}
	return best
}

// TestSentinelFailover is a real Sentinel failover: a primary, two
// replicas and three sentinels (down-after 1s), the clients on a
// redis+sentinel:// URL, and the primary SIGKILLed right after a grant;
// the sentinels promote a replica and the clients follow. It counts what
// the safety table counts, with WaitReplicas off and on and the fence
// guard off and on, and logs how long after the kill the next grant came.
func TestSentinelFailover(t *testing.T) {
	for _, waitReplicas := range []int{0, 1} {
		for _, guard := range []bool{false, true} {
			fault := "Sentinel failover: primary SIGKILLed after a grant"
			if waitReplicas > 0 {
				fault += fmt.Sprintf(", WaitReplicas %d", waitReplicas)
			}
			t.Run(fmt.Sprintf("wait_replicas=%d/guard=%v", waitReplicas, guard), func(t *testing.T) {
				rounds := scale(1, 6)
				var total Result
				var resumed []time.Duration
				for range rounds {
					r, d := sentinelRound(t, waitReplicas, guard)
					total = total.Add(r)
					resumed = append(resumed, d)
				}
				t.Logf("grants resumed after the kill: %v", resumed)
				report(t, "redis+sentinel (primary, 2 replicas, 3 sentinels)", fault, guard, rounds, total)
			})
		}
	}
}

func sentinelRound(t *testing.T, waitReplicas int, guard bool) (Result, time.Duration) {
	t.Helper()
	ps := testenv.StartSentinel(t, testenv.SentinelOptions{})
	const ttl, hold = 500 * time.Millisecond, 750 * time.Millisecond
	url := "redis+sentinel://" + strings.Join(ps.SentinelAddrs(), ",") + "?master_name=" + testenv.SentinelMaster + "&" + redisClientParams
	url += fmt.Sprintf("&wait_replicas=%d&wait_timeout=500ms", waitReplicas) // 0: off, not the default
	wl := workload{url: url, clients: 3, dur: scale(5*time.Second, 8*time.Second), ttl: ttl, hold: hold, guard: guard}
	return killAfterGrant(t, wl, func(ctx context.Context) bool {
		primary, err := ps.Primary(ctx)
		if err != nil || primary == nil {
			t.Errorf("the primary before the kill: %v", err)
			return false
		}
		primary.Kill()
		return true
	})
}

// killAfterGrant runs wl and, a fifth of the way in, right after a grant,
// calls kill. It returns the run's result and how long after the kill the
// next critical section began, and fails t when none did.
func killAfterGrant(t *testing.T, wl workload, kill func(ctx context.Context) bool) (Result, time.Duration) {
	t.Helper()
	var killedAt time.Time
	r, w := run(t, wl, func(ctx context.Context, w *workers) {
		if !grantAfter(ctx, w, wl.dur/5) {
			return
		}
		if kill(ctx) {
			killedAt = time.Now()
		}
	})
	if killedAt.IsZero() {
		t.Fatal("the run ended before the kill")
	}
	d := resumedAfter(w, killedAt)
	if d < 0 {
		t.Errorf("no grant after the kill (%d acquire errors, first: %v)", len(w.errs), first(w.errs))
	}
	return r, d
}

// TestClusterFailover is a real Redis Cluster failover: three primaries
// with a replica each (node timeout 1s), the clients on a redis+cluster://
// URL, and the primary of the lock's slot SIGKILLed right after a grant;
// its replica takes over. It also checks that a lock on another primary's
// slot, held across the failover, is not disturbed.
func TestClusterFailover(t *testing.T) {
	rounds := scale(1, 6)
	var total Result
	var resumed []time.Duration
	for range rounds {
		r, d := clusterRound(t)
		total = total.Add(r)
		resumed = append(resumed, d)
	}
	t.Logf("grants resumed after the kill: %v", resumed)
	report(t, "redis+cluster (3 primaries, 1 replica each)", "Cluster failover: the lock's primary SIGKILLed after a grant, wait_replicas=0 (off)", true, rounds, total)
}

func clusterRound(t *testing.T) (Result, time.Duration) {
	t.Helper()
	cs := testenv.StartRedisCluster(t, testenv.ClusterOptions{})
	admin := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cs.Addrs()})
	defer admin.Close()
	ctx := t.Context()
	// The replica wait off: the promoted replica has no replica of its
	// own, and by default no grant would come on its slots until one is
	// attached (Cluster in docs/REDIS.md).
	url := "redis+cluster://" + strings.Join(cs.Addrs()[:3], ",") + "?" + redisClientParams + "&wait_replicas=0"
	const ttl, hold = 500 * time.Millisecond, 750 * time.Millisecond
	name := fmt.Sprintf("safety-%d", time.Now().UnixNano())
	primaryOf := func(name string) string {
		c, err := admin.MasterForKey(ctx, "dlock:{"+name+"}")
		if err != nil {
			t.Fatal(err)
		}
		return c.Options().Addr
	}
	lockPrimary := primaryOf(name)

	// A lock on a name of another primary, held across the failover.
	other := ""
	for i := 0; other == ""; i++ {
		if n := fmt.Sprintf("%s-other-%d", name, i); primaryOf(n) != lockPrimary {
			other = n
		}
	}
	bystander, err := dlock.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer bystander.Close()
	held, err := bystander.Acquire(ctx, other, dlock.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}

	wl := workload{url: url, clients: 3, dur: scale(8*time.Second, 10*time.Second), ttl: ttl, hold: hold, guard: true, name: name}
	r, d := killAfterGrant(t, wl, func(context.Context) bool {
		for _, s := range cs.Servers {
			if s.Addr == lockPrimary {
				s.Kill()
				return true
			}
		}
		t.Errorf("no server at %s, the lock's primary", lockPrimary)
		return false
	})
	if err := held.Err(); err != nil {
		t.Errorf("the lock on %s (another primary's slot) was disturbed by the failover: %v", other, err)
	}
	if v, err := admin.Get(ctx, "dlock:{"+other+"}").Result(); err != nil || v != held.Owner() {
		t.Errorf("the key of %s after the failover: %q, %v; want its owner", other, v, err)
	}
	if err := held.Release(ctx); err != nil {
		t.Errorf("release %s: %v", other, err)
	}
	return r, d
}

// TestClusterReshard moves the lock's slot between two primaries of a
// Redis Cluster while the workers take and release the lock, with the
// slot's keys held split over the two for 1.5 s mid-move: holders must
// keep or cleanly lose the lock, waiters must not be stranded.
func TestClusterReshard(t *testing.T) {
	rounds := scale(1, 6)
	var total Result
	for range rounds {
		total = total.Add(reshardRound(t))
	}
	report(t, "redis+cluster (3 primaries, 1 replica each)", "the lock's slot migrated to another primary (keys split for 1.5s)", true, rounds, total)
}

func reshardRound(t *testing.T) Result {
	t.Helper()
	cs := testenv.StartRedisCluster(t, testenv.ClusterOptions{})
	name := fmt.Sprintf("safety-%d", time.Now().UnixNano())
	slot, from, to := cs.SlotOf(t, "dlock:{"+name+"}")
	url := "redis+cluster://" + strings.Join(cs.Addrs()[:3], ",") + "?" + redisClientParams
	wl := workload{url: url, clients: 3, dur: scale(5*time.Second, 8*time.Second),
		ttl: 500 * time.Millisecond, hold: 750 * time.Millisecond, guard: true, name: name}
	moved := false
	r, _ := run(t, wl, func(ctx context.Context, w *workers) {
		if !grantAfter(ctx, w, wl.dur/5) {
			return
		}
		err := cs.MoveSlot(ctx, slot, from, to, func(n int) {
			if n == 1 {
				sleepCtx(ctx, 1500*time.Millisecond)
			}
		})
		if err != nil {
			t.Errorf("move slot %d: %v", slot, err)
			return
		}
		moved = true
	})
	if !moved {
		t.Error("the run ended before the slot was moved")
	}
	return r
}
