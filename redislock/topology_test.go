package redislock

import (
	"context"
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
