package redislock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/locktest"
)

// TestDiagnose: Diagnose on servers set up well and wrong on purpose
// (dlock doctor's checks): a persistent primary with a replica that grants
// wait for passes every check; an evicting server fails, or warns while it
// has no memory limit; a server without persistence warns; a replica
// fails; grants that do not wait for the primary's replica warn; a
// Cluster's slots are checked.
func TestDiagnose(t *testing.T) {
	const ttl = 10 * time.Second
	t.Run("primary with a replica, persistent", func(t *testing.T) {
		p := testenv.StartRedis(t, testenv.RedisOptions{Persist: true, Args: []string{"--appendfsync", "always"}})
		r := startReplica(t, p)
		fs := locktest.Diagnose(t, newDriverOn(t, p.Client(), nil), ttl)
		locktest.NoFail(t, fs)
		locktest.WantFinding(t, fs, "maxmemory-policy", driver.OK, "noeviction")
		locktest.WantFinding(t, fs, "persistence", driver.OK, "appendonly yes, appendfsync always")
		locktest.WantFinding(t, fs, "role", driver.OK, "master")
		locktest.WantFinding(t, fs, "wait_replicas", driver.OK, "every grant and renewal waits for 1")
		locktest.WantFinding(t, fs, "round trip", driver.OK, "TTL 10s")

		fs = locktest.Diagnose(t, newDriverOn(t, p.Client(), &Options{WaitReplicas: -1}), ttl)
		locktest.WantFinding(t, fs, "wait_replicas", driver.Warn, "do not wait")

		fs = locktest.Diagnose(t, newDriverOn(t, r.Client(), nil), ttl)
		locktest.WantFinding(t, fs, "role", driver.Fail, "slave of "+p.Addr)
	})
	t.Run("evicting", func(t *testing.T) {
		s := testenv.StartRedis(t, testenv.RedisOptions{Args: []string{"--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru"}})
		fs := locktest.Diagnose(t, newDriverOn(t, s.Client(), nil), ttl)
		locktest.WantFinding(t, fs, "maxmemory-policy", driver.Fail, "allkeys-lru")
		locktest.WantFinding(t, fs, "persistence", driver.Warn, "appendonly no")
	})
	t.Run("evicting policy, no limit", func(t *testing.T) {
		s := testenv.StartRedis(t, testenv.RedisOptions{Args: []string{"--maxmemory-policy", "volatile-lru"}})
		fs := locktest.Diagnose(t, newDriverOn(t, s.Client(), nil), ttl)
		locktest.WantFinding(t, fs, "maxmemory-policy", driver.Warn, "volatile-lru, maxmemory 0")
	})
	t.Run("cluster", func(t *testing.T) {
		c := startCluster(t)
		// The Driver asks once whether grants must wait, of whichever node
		// answers: only after every node lists the replicas.
		if !locktest.Eventually(30*time.Second, func() bool {
			err := c.ForEachShard(context.Background(), func(ctx context.Context, n *redis.Client) error {
				//lint:ignore SA1019 CLUSTER SLOTS, as hasReplicas asks
				slots, err := n.ClusterSlots(ctx).Result()
				for _, s := range slots {
					if len(s.Nodes) < 2 && err == nil {
						err = errors.New("a slot range without a replica")
					}
				}
				return err
			})
			return err == nil
		}) {
			t.Fatal("not every node's CLUSTER SLOTS lists the replicas 30s after the cluster started")
		}
		fs := locktest.Diagnose(t, newDriverOn(t, c, nil), ttl)
		locktest.NoFail(t, fs)
		locktest.WantFinding(t, fs, "cluster slots", driver.OK, "16384 of 16384")
		locktest.WantFinding(t, fs, "role", driver.OK, "master")
		locktest.WantFinding(t, fs, "wait_replicas", driver.OK, "waits for 1")
	})
}
