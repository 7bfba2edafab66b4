package redisutil

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock/driver"
)

// Server is what Diagnose read of one Redis server.
type Server struct {
	Findings []driver.Finding
	Primary  bool // the server is a primary (role:master)
	Replicas int  // its connected replicas
}

// Diagnose reads one server's settings through c (CONFIG GET, INFO
// replication) and judges them for locks: eviction, persistence, role.
// where, if set, names the server in each finding ("on host:port").
// A setting it cannot read (CONFIG renamed, an ACL without +config) is a
// warning that says so.
func Diagnose(ctx context.Context, c redis.Cmdable, where string) Server {
	var s Server
	on := func(f driver.Finding) {
		if where != "" {
			f.Found += " (" + where + ")"
		}
		s.Findings = append(s.Findings, f)
	}
	conf := map[string]string{}
	var confErr error
	for _, k := range []string{"maxmemory-policy", "maxmemory", "appendonly", "appendfsync"} {
		m, err := c.ConfigGet(ctx, k).Result()
		if err != nil {
			confErr = err
			break
		}
		conf[k] = m[k]
	}
	if confErr != nil {
		on(driver.Finding{Check: "configuration", Severity: driver.Warn,
			Found: "CONFIG GET refused: " + confErr.Error(),
			Why:   "Eviction and persistence cannot be checked: an evicting Redis frees locks their holders still use",
			Fix:   "Grant +config|get to this user, or check maxmemory-policy and appendonly on the server by hand",
			Doc:   "docs/REDIS.md#eviction"})
	} else {
		on(eviction(conf["maxmemory-policy"], conf["maxmemory"]))
		on(persistence(conf["appendonly"], conf["appendfsync"]))
	}

	info, err := c.Info(ctx, "replication").Result()
	if err != nil {
		on(driver.Finding{Check: "role", Severity: driver.Warn, Found: "INFO replication refused: " + err.Error(),
			Why: "Whether this server is a primary cannot be checked", Fix: "Grant +info to this user",
			Doc: "docs/REDIS.md#sentinel"})
		s.Primary = true // as far as anyone can tell
		return s
	}
	role, replicas := InfoField(info, "role"), InfoField(info, "connected_slaves")
	s.Replicas, _ = strconv.Atoi(replicas)
	s.Primary = role == "master"
	f := driver.Finding{Check: "role", Found: role, Doc: "docs/REDIS.md#sentinel"}
	if !s.Primary {
		f.Severity = driver.Fail
		f.Found = fmt.Sprintf("%s of %s:%s", role, InfoField(info, "master_host"), InfoField(info, "master_port"))
		f.Why = "A replica refuses the lock's writes (replica-read-only), or, made writable, holds locks its primary never sees: two holders"
		f.Fix = "Point the URL at the primary (or at the sentinels: redis+sentinel://)"
	}
	on(f)
	return s
}

// eviction judges maxmemory-policy and maxmemory.
func eviction(policy, maxmemory string) driver.Finding {
	f := driver.Finding{Check: "maxmemory-policy", Found: policy + ", maxmemory " + maxmemory, Doc: "docs/REDIS.md#eviction"}
	if policy == "noeviction" {
		return f
	}
	f.Why = "An evicted lock key frees the lock while its holder still uses it, and another client takes it at once"
	f.Fix = "CONFIG SET maxmemory-policy noeviction, and the same in redis.conf"
	f.Severity = driver.Fail
	if maxmemory == "0" {
		f.Severity = driver.Warn
		f.Why = "No memory limit is set, so nothing is evicted yet; a limit set later (CONFIG SET maxmemory) evicts lock keys, freeing locks their holders still use"
	}
	return f
}

// persistence judges appendonly and appendfsync.
func persistence(appendonly, fsync string) driver.Finding {
	f := driver.Finding{Check: "persistence", Found: "appendonly " + appendonly, Doc: "docs/REDIS.md#persistence"}
	if appendonly != "yes" {
		f.Severity = driver.Warn
		f.Why = "A restart loses the held locks: until their holders' next renewal (a third of the TTL) another client can take one; " +
			"fencing tokens stay increasing (a missing counter starts from the server's clock)"
		f.Fix = "Set appendonly yes with appendfsync everysec or always, or restart Redis only after a TTL without locks"
		return f
	}
	f.Found += ", appendfsync " + fsync
	if fsync == "no" {
		f.Severity = driver.Warn
		f.Why = "The operating system decides when grants reach the disk: a host crash can lose the last seconds' grants and renewals"
		f.Fix = "Set appendfsync everysec (at most a second lost to a host crash) or always"
	}
	return f
}

// InfoField returns the value of field in an INFO reply.
func InfoField(info, field string) string {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimRight(line, "\r\n"), field+":"); ok {
			return v
		}
	}
	return ""
}
