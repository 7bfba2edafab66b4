package redislock

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/locktest"
)

// clusterURL returns the redis+cluster:// URL of cs with the driver
// prefix p: the first node in the host, the others as addr parameters
// (go-redis's form) and in the host list by turns, so that both forms
// are read.
func clusterURL(cs *testenv.ClusterSetup, p string) string {
	a := cs.Addrs()
	q := url.Values{"prefix": {p}}
	for _, x := range a[2:] {
		q.Add("addr", x)
	}
	return "redis+cluster://" + a[0] + "," + a[1] + "?" + q.Encode()
}

// sentinelURL returns the redis+sentinel:// URL of ps with the driver
// prefix p and any more parameters.
func sentinelURL(ps *testenv.SentinelSetup, p string, more ...string) string {
	q := url.Values{"master_name": {testenv.SentinelMaster}, "prefix": {p}}
	for i := 0; i+1 < len(more); i += 2 {
		q.Set(more[i], more[i+1])
	}
	return "redis+sentinel://" + strings.Join(ps.SentinelAddrs(), ",") + "?" + q.Encode()
}

// openURL opens a Locker from rawURL, closed when the test ends.
func openURL(t *testing.T, rawURL string, opts ...dlock.Option) *dlock.Locker {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := dlock.Open(ctx, rawURL, opts...)
	if err != nil {
		t.Fatalf("Open %s: %v", rawURL, err)
	}
	return l
}

// The conformance suite on a Redis Cluster of three primaries with a
// replica each, opened by a redis+cluster:// URL: lock names spread over
// the slots of every primary.
func TestClusterConformance(t *testing.T) {
	cs := testenv.StartRedisCluster(t, testenv.ClusterOptions{})
	admin := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cs.Addrs()})
	t.Cleanup(func() { _ = admin.Close() })
	prefix := "dlocktest:" + randomHex(6) + ":"
	rawURL := clusterURL(cs, prefix)
	locktest.Run(t, locktest.Harness{
		NewLocker: func(t *testing.T, opts ...dlock.Option) *dlock.Locker {
			l := openURL(t, rawURL, opts...)
			if _, ok := l.Driver().(*Driver).Client().(*redis.ClusterClient); !ok {
				t.Fatalf("%s opened a %T, want a *redis.ClusterClient", rawURL, l.Driver().(*Driver).Client())
			}
			return l
		},
		TakeAway: func(t *testing.T, name string) {
			if err := admin.Del(t.Context(), prefix+"{"+name+"}").Err(); err != nil {
				t.Fatal(err)
			}
		},
		TTL: 500 * time.Millisecond,
	})
}

// The conformance suite on a Sentinel-managed primary with two replicas
// and three sentinels, opened by a redis+sentinel:// URL.
func TestSentinelConformance(t *testing.T) {
	ps := testenv.StartSentinel(t, testenv.SentinelOptions{})
	admin := ps.Servers[0].Client()
	prefix := "dlocktest:" + randomHex(6) + ":"
	rawURL := sentinelURL(ps, prefix)
	locktest.Run(t, locktest.Harness{
		NewLocker: func(t *testing.T, opts ...dlock.Option) *dlock.Locker {
			l := openURL(t, rawURL, opts...)
			if c, ok := l.Driver().(*Driver).Client().(*redis.Client); !ok || c.Options().Addr != "FailoverClient" {
				t.Fatalf("%s opened %v, want a failover client", rawURL, l.Driver().(*Driver).Client())
			}
			return l
		},
		TakeAway: func(t *testing.T, name string) {
			if err := admin.Del(t.Context(), prefix+"{"+name+"}").Err(); err != nil {
				t.Fatal(err)
			}
		},
		TTL: 500 * time.Millisecond,
	})
}

// With WaitReplicas equal to every replica, a failover leaves the promoted
// primary one replica short until the old primary comes back: in that
// interval each acquisition fails with ErrNotReplicated within the
// WAIT timeout (it never hangs), and once the restarted old primary has
// rejoined as a replica, acquisitions succeed again.
func TestSentinelWaitEveryReplica(t *testing.T) {
	ps := testenv.StartSentinel(t, testenv.SentinelOptions{})
	l := openURL(t, sentinelURL(ps, "dlocktest:"+randomHex(6)+":", "wait_replicas", "2", "wait_timeout", "300ms",
		"dial_timeout", "200ms", "read_timeout", "1s"))
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	lease, err := l.TryAcquire(ctx, "every-replica")
	if err != nil {
		t.Fatalf("TryAcquire with both replicas up: %v", err)
	}
	_ = lease.Release(ctx)

	old, err := ps.Primary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	old.Kill()
	killed := time.Now()
	for {
		p, err := ps.Primary(ctx)
		if err == nil && p != nil && p != old {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the sentinels did not fail over")
		}
		time.Sleep(50 * time.Millisecond)
	}
	promoted := time.Since(killed)

	// Until the old primary is back, every attempt fails, and promptly.
	var lastErr error
	for range 3 {
		start := time.Now()
		lease, err := l.TryAcquire(ctx, "every-replica")
		took := time.Since(start)
		if err == nil {
			_ = lease.Release(ctx)
			t.Fatal("TryAcquire succeeded with one of two replicas")
		}
		lastErr = err
		if took > 2*time.Second {
			t.Errorf("a failing TryAcquire took %v (WAIT timeout 300ms, read timeout 1s)", took)
		}
		if errors.Is(err, ErrNotReplicated) {
			break
		}
		time.Sleep(200 * time.Millisecond) // the client is still finding the new primary
	}
	if !errors.Is(lastErr, ErrNotReplicated) {
		t.Fatalf("TryAcquire after the failover: %v, want ErrNotReplicated", lastErr)
	}

	old.Start()
	restarted := time.Now()
	for {
		lease, err := l.TryAcquire(ctx, "every-replica")
		if err == nil {
			_ = lease.Release(ctx)
			break
		}
		if !errors.Is(err, ErrNotReplicated) && ctx.Err() == nil {
			t.Logf("while the old primary rejoins: %v", err)
		}
		if ctx.Err() != nil {
			t.Fatalf("no grant after the old primary restarted: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("promoted %v after the kill; ErrNotReplicated until the old primary rejoined; grants again %v after its restart (%v after the kill)",
		promoted.Round(time.Millisecond), time.Since(restarted).Round(time.Millisecond), time.Since(killed).Round(time.Millisecond))
}
