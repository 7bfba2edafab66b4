package redislock

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/locktest"
)

// TestDiagnoseSentinel: Diagnose's Sentinel checks through a
// redis+sentinel:// URL with credentials, on a primary, two replicas and
// three sentinels (quorum 2) set up well and then wrong on purpose: the
// healthy setup passes them; a quorum of 4 over 3 sentinels fails
// CKQUORUM; both replicas down leaves a failover nowhere to go (a
// warning); two of the three sentinels down warn, naming them, and fail
// CKQUORUM on the last.
func TestDiagnoseSentinel(t *testing.T) {
	const pw, ttl = "doctor-sentinel-pw", 10 * time.Second
	ps := testenv.StartSentinel(t, testenv.SentinelOptions{Password: pw})
	q := url.Values{"master_name": {testenv.SentinelMaster}, "sentinel_password": {pw}, "prefix": {"dlocktest:" + randomHex(6) + ":"}}
	rawURL := "redis+sentinel://:" + pw + "@" + strings.Join(ps.SentinelAddrs(), ",") + "?" + q.Encode()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	diagnose := func(t *testing.T) []driver.Finding {
		t.Helper()
		l := locktest.Opened(t)(dlock.Open(ctx, rawURL))
		fs := locktest.Diagnose(t, l.Driver().(*Driver), ttl)
		for _, f := range fs {
			t.Logf("%-4s %s: %s", f.Severity, f.Check, f.Found)
		}
		return fs
	}
	// sentinel runs f on a client of every sentinel still running.
	sentinels := func(f func(c *redis.SentinelClient) error) error {
		for _, s := range ps.Sentinels {
			if !s.Running() {
				continue
			}
			c := redis.NewSentinelClient(&redis.Options{Addr: s.Addr, Password: pw})
			err := f(c)
			_ = c.Close()
			if err != nil {
				return err
			}
		}
		return nil
	}
	// until polls cond until it holds, failing t after 30s.
	until := func(t *testing.T, what string, cond func() bool) {
		t.Helper()
		if !locktest.Eventually(30*time.Second, func() bool { time.Sleep(50 * time.Millisecond); return cond() }) {
			t.Fatalf("not %s after 30s", what)
		}
	}

	t.Run("healthy", func(t *testing.T) {
		fs := diagnose(t)
		locktest.NoFail(t, fs)
		locktest.WantFinding(t, fs, "sentinels", driver.OK, "3 of 3 listed answer")
		locktest.WantFinding(t, fs, "sentinel quorum", driver.OK, "quorum 2; OK 3 usable Sentinels")
		locktest.WantFinding(t, fs, "sentinel replicas", driver.OK, "2 replicas, 2 can be promoted")
		locktest.WantFinding(t, fs, "min-replicas-to-write", driver.OK, "0 (max lag 10s) on the primary")
		locktest.WantFinding(t, fs, "role", driver.OK, "master")
	})

	t.Run("quorum above the sentinels", func(t *testing.T) {
		setQuorum := func(n string) {
			t.Helper()
			if err := sentinels(func(c *redis.SentinelClient) error {
				return c.Set(ctx, testenv.SentinelMaster, "quorum", n).Err()
			}); err != nil {
				t.Fatal(err)
			}
		}
		setQuorum("4")
		defer setQuorum("2")
		fs := diagnose(t)
		locktest.WantFinding(t, fs, "sentinel quorum", driver.Fail, "quorum 4; NOQUORUM 3 usable Sentinels")
	})

	t.Run("no replica to fail over to", func(t *testing.T) {
		for _, r := range ps.Servers[1:] {
			r.Kill()
		}
		until(t, "both replicas down as the sentinels see them", func() bool {
			down := true
			err := sentinels(func(c *redis.SentinelClient) error {
				rs, err := c.Replicas(ctx, testenv.SentinelMaster).Result()
				for _, r := range rs {
					down = down && strings.Contains(r["flags"], "s_down")
				}
				return err
			})
			return err == nil && down
		})
		fs := diagnose(t)
		locktest.WantFinding(t, fs, "sentinel replicas", driver.Warn, "2 replicas, 0 can be promoted")
		locktest.WantFinding(t, fs, "sentinel quorum", driver.OK, "OK 3 usable Sentinels")
	})

	t.Run("two sentinels down", func(t *testing.T) {
		ps.Sentinels[0].Kill()
		ps.Sentinels[2].Kill()
		until(t, "NOQUORUM on the last sentinel", func() bool {
			return sentinels(func(c *redis.SentinelClient) error { return c.CkQuorum(ctx, testenv.SentinelMaster).Err() }) != nil
		})
		fs := diagnose(t)
		locktest.WantFinding(t, fs, "sentinels", driver.Warn, "1 of 3 listed answer")
		locktest.WantFinding(t, fs, "sentinels", driver.Warn, ps.Sentinels[0].Addr)
		locktest.WantFinding(t, fs, "sentinels", driver.Warn, ps.Sentinels[2].Addr)
		locktest.WantFinding(t, fs, "sentinel quorum", driver.Fail, "NOQUORUM 1 usable Sentinels")
	})
}
