package redlock

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/locktest"
)

// TestDiagnose: Diagnose on five persistent nodes of the test's own, set
// up well and then wrong on purpose (dlock doctor's checks): the good
// nodes pass every check; one evicting node fails, named; a replica among
// the nodes fails, named; one server listed twice fails; two nodes down
// (a quorum left) warn, naming them; three down (no quorum) fail; all
// down is Diagnose's error.
func TestDiagnose(t *testing.T) {
	const ttl = 10 * time.Second
	servers := testenv.StartRedisN(t, 5, testenv.RedisOptions{Persist: true})
	c := &cluster{t: t, servers: servers}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin := func(i int) *redis.Client { return servers[i].Client() }
	// A driver as dlock doctor opens it: the nodes not dialled yet.
	newDriver := func(t *testing.T, clients []redis.UniversalClient) *Driver {
		t.Helper()
		d, err := NewDriver(clients, testOptions(&Options{Logger: slog.New(slog.DiscardHandler)}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = d.Close() })
		return d
	}
	diagnose := func(t *testing.T) []driver.Finding {
		t.Helper()
		fs := locktest.Diagnose(t, newDriver(t, c.clients(t)), ttl)
		for _, f := range fs {
			t.Logf("%-4s %s: %s", f.Severity, f.Check, f.Found)
		}
		return fs
	}

	t.Run("good nodes", func(t *testing.T) {
		fs := diagnose(t)
		locktest.NoFail(t, fs)
		locktest.WantFinding(t, fs, "nodes", driver.OK, "5 of 5 nodes answer; quorum 3")
		locktest.WantFinding(t, fs, "distinct servers", driver.OK, "5 nodes, each a server of its own")
		locktest.WantFinding(t, fs, "node timeout", driver.OK, "node timeout 50ms")
		locktest.WantFinding(t, fs, "maxmemory-policy", driver.OK, "noeviction")
		locktest.WantFinding(t, fs, "persistence", driver.OK, "appendonly yes, appendfsync always")
		locktest.WantFinding(t, fs, "role", driver.OK, "master")
		locktest.WantFinding(t, fs, "round trip", driver.OK, "TTL 10s")
		for _, s := range servers {
			wantOn(t, fs, "role", s.Addr, driver.OK, "master")
			wantOn(t, fs, "clock", s.Addr, driver.OK, "the store's clock")
		}
	})

	t.Run("one node evicting", func(t *testing.T) {
		a := admin(1)
		for _, kv := range [][2]string{{"maxmemory", "64mb"}, {"maxmemory-policy", "allkeys-lru"}} {
			if err := a.ConfigSet(ctx, kv[0], kv[1]).Err(); err != nil {
				t.Fatal(err)
			}
		}
		defer func() {
			if err := a.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
				t.Fatal(err)
			}
		}()
		fs := diagnose(t)
		wantOn(t, fs, "maxmemory-policy", servers[1].Addr, driver.Fail, "allkeys-lru")
		for _, i := range []int{0, 2, 3, 4} {
			wantOn(t, fs, "maxmemory-policy", servers[i].Addr, driver.OK, "noeviction")
		}
	})

	t.Run("a replica among the nodes", func(t *testing.T) {
		a := admin(3)
		host, port, _ := strings.Cut(servers[0].Addr, ":")
		if err := a.Do(ctx, "REPLICAOF", host, port).Err(); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := a.Do(ctx, "REPLICAOF", "NO", "ONE").Err(); err != nil {
				t.Fatal(err)
			}
		}()
		fs := diagnose(t)
		f := wantOn(t, fs, "role", servers[3].Addr, driver.Fail, "slave of "+servers[0].Addr)
		if !strings.Contains(f.Why, "independent primaries") {
			t.Errorf("role: why %q does not say the nodes must be independent primaries", f.Why)
		}
		wantOn(t, fs, "role", servers[0].Addr, driver.OK, "master")
	})

	t.Run("one server listed twice", func(t *testing.T) {
		clients := c.clients(t)
		fs := locktest.Diagnose(t, newDriver(t, append(clients[:2:2], clients[0])), ttl)
		locktest.WantFinding(t, fs, "distinct servers", driver.Fail, servers[0].Addr+" is "+servers[0].Addr)
	})

	t.Run("two nodes down, a quorum left", func(t *testing.T) {
		servers[2].Kill()
		servers[4].Kill()
		fs := diagnose(t)
		locktest.NoFail(t, fs)
		locktest.WantFinding(t, fs, "nodes", driver.Warn, "3 of 5 nodes answer; quorum 3")
		locktest.WantFinding(t, fs, "nodes", driver.Warn, servers[2].Addr)
		locktest.WantFinding(t, fs, "nodes", driver.Warn, servers[4].Addr)
		for _, f := range fs {
			if f.Check != "nodes" && (strings.Contains(f.Found, servers[2].Addr) || strings.Contains(f.Found, servers[4].Addr)) {
				t.Errorf("a node that is down checked: %s: %s", f.Check, f.Found)
			}
		}
	})

	t.Run("three nodes down, no quorum", func(t *testing.T) {
		servers[2].Kill()
		servers[4].Kill()
		servers[3].Kill()
		fs := diagnose(t)
		locktest.WantFinding(t, fs, "nodes", driver.Fail, "2 of 5 nodes answer; quorum 3")
		wantOn(t, fs, "role", servers[0].Addr, driver.OK, "master")
	})

	t.Run("every node down", func(t *testing.T) {
		for _, s := range servers {
			s.Kill()
		}
		dctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		fs, err := newDriver(t, c.clients(t)).Diagnose(dctx, ttl)
		if err == nil {
			t.Fatalf("Diagnose with every node down: no error, findings %+v", fs)
		}
		t.Log(err)
	})
}

// wantOn fails t unless fs has a finding of check on the node at addr
// (named in its text) with severity want and text containing found, and
// returns it.
func wantOn(t *testing.T, fs []driver.Finding, check, addr string, want driver.Severity, found string) driver.Finding {
	t.Helper()
	for _, f := range fs {
		if f.Check == check && strings.Contains(f.Found, "("+addr+")") {
			if f.Severity != want || !strings.Contains(f.Found, found) {
				t.Errorf("%s on %s: %s %q; want %s, found containing %q", check, addr, f.Severity, f.Found, want, found)
			}
			return f
		}
	}
	t.Errorf("no %s finding on %s among %+v", check, addr, fs)
	return driver.Finding{}
}
