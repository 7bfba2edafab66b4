package redislock

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/internal/doctor"
	"github.com/dlockgo/dlock/internal/redisutil"
)

// Diagnose implements driver.Diagnoser: the round trip and the server's
// clock (TIME), then each server's eviction policy, persistence and role
// (every primary of a Cluster), the Cluster's slot coverage, whether
// grants wait for a replica where the primary has replicas, and, opened
// from a redis+sentinel URL, the sentinels (see diagnoseSentinel). It
// only reads.
func (d *Driver) Diagnose(ctx context.Context, ttl time.Duration) ([]driver.Finding, error) {
	fs, err := doctor.Clock(ctx, ttl, "docs/REDIS.md", func(ctx context.Context) (time.Time, error) {
		return d.client.Time(ctx).Result()
	})
	if err != nil {
		return nil, fmt.Errorf("redislock: %w", err)
	}
	replicas := 0
	switch c := d.client.(type) {
	case *redis.ClusterClient:
		fs = append(fs, clusterState(ctx, c))
		var mu sync.Mutex
		err := c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			s := redisutil.Diagnose(ctx, m, m.Options().Addr)
			mu.Lock()
			defer mu.Unlock()
			fs = append(fs, s.Findings...)
			replicas = max(replicas, s.Replicas)
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("redislock: %w", err)
		}
	default:
		s := redisutil.Diagnose(ctx, d.client, "")
		fs = append(fs, s.Findings...)
		replicas = s.Replicas
	}
	fs = append(fs, d.replicaWait(ctx, replicas))
	if d.sentinel != nil {
		fs = append(fs, d.diagnoseSentinel(ctx)...)
	}
	return fs, nil
}

// replicaWait judges whether grants wait for a replica's acknowledgement,
// given the most replicas a primary has.
func (d *Driver) replicaWait(ctx context.Context, replicas int) driver.Finding {
	f := driver.Finding{Check: "wait_replicas", Doc: "docs/REDIS.md#sentinel"}
	n, err := d.replicasToWait(ctx)
	switch {
	case err != nil:
		f.Severity = driver.Warn
		f.Found = "cannot tell: " + err.Error()
		f.Why = "Whether grants wait for a replica could not be read"
	case replicas == 0:
		f.Found = "no replicas; grants do not wait"
	case n == 0:
		f.Severity = driver.Warn
		f.Found = fmt.Sprintf("%d replicas, but grants do not wait for any (wait_replicas=0)", replicas)
		f.Why = "A failover to a replica that lacks the latest grant, or a primary cut off with its holder, can give the lock to two holders"
		f.Fix = "Drop wait_replicas=0 from the URL (the default waits for one replica), or set wait_replicas=1"
	default:
		f.Found = fmt.Sprintf("%d replicas; every grant and renewal waits for %d", replicas, n)
	}
	return f
}

// clusterState judges CLUSTER INFO: every slot assigned and served.
func clusterState(ctx context.Context, c *redis.ClusterClient) driver.Finding {
	f := driver.Finding{Check: "cluster slots", Doc: "docs/REDIS.md#cluster"}
	info, err := c.ClusterInfo(ctx).Result()
	if err != nil {
		f.Severity, f.Found = driver.Warn, "CLUSTER INFO refused: "+err.Error()
		f.Why = "Whether every slot is served cannot be checked"
		return f
	}
	state, ok := redisutil.InfoField(info, "cluster_state"), redisutil.InfoField(info, "cluster_slots_ok")
	f.Found = fmt.Sprintf("cluster_state %s, %s of 16384 slots ok", state, ok)
	if state != "ok" || ok != "16384" {
		f.Severity = driver.Fail
		f.Why = "Names whose slot is not served cannot be locked, nor released or renewed: their leases are lost"
		f.Fix = "Assign every slot to a reachable primary (redis-cli --cluster fix)"
	}
	return f
}
