package redisfence_test

import (
	"context"
	"errors"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock/fence"
	"github.com/dlockgo/dlock/fence/redisfence"
)

// startClusterNode starts a one-node Redis Cluster owning every slot on a
// free loopback port, killed when the test ends. Redis Cluster refuses a
// script whose keys are in different slots (CROSSSLOT), so running the
// fence scripts through a ClusterClient shows that a key's value and
// token share a slot.
func startClusterNode(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("redis-server not found: %v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	dir := t.TempDir()
	cmd := exec.Command("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--dir", dir, "--save", "", "--appendonly", "no", "--loglevel", "warning",
		"--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(dir, "nodes.conf"))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addr := "127.0.0.1:" + strconv.Itoa(port)
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	ctx := context.Background()
	deadline := time.Now().Add(10 * time.Second)
	for c.Ping(ctx).Err() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("cluster node %s does not answer", addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := c.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", 0, 16383).Err(); err != nil {
		t.Fatal(err)
	}
	for {
		info, err := c.ClusterInfo(ctx).Result()
		if err == nil && strings.Contains(info, "cluster_state:ok") {
			return addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("cluster state not ok: %q, %v", info, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestRedisCluster(t *testing.T) {
	addr := startClusterNode(t)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{addr}})
	defer c.Close()
	ctx := context.Background()

	// The control: a script over two keys in different slots is refused,
	// so the fence scripts below would be too if they used two keys.
	err := c.Eval(ctx, "return 1", []string{"a", "b"}).Err()
	if err == nil || !strings.Contains(err.Error(), "CROSSSLOT") {
		t.Fatalf("a two-slot script: %v, want CROSSSLOT", err)
	}

	for _, key := range []string{"orders:1", "orders:2", "{user:7}:profile"} {
		if err := redisfence.Set(ctx, c, key, "v2", 2); err != nil {
			t.Fatalf("Set(%s) on Redis Cluster: %v", key, err)
		}
		if err := redisfence.Set(ctx, c, key, "v1", 1); !errors.Is(err, fence.ErrStale) {
			t.Fatalf("Set(%s, 1) after 2: %v, want ErrStale", key, err)
		}
		if v, tok, err := redisfence.Get(ctx, c, key); v != "v2" || tok != 2 || err != nil {
			t.Fatalf("Get(%s) = %q, %d, %v", key, v, tok, err)
		}
	}
	g := redisfence.Guard{Client: c, Prefix: "guard:"}
	if err := g.Admit(ctx, "x", 5); err != nil {
		t.Fatal(err)
	}
	if err := g.Admit(ctx, "x", 4); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("Guard.Admit(4) after 5 on Redis Cluster: %v", err)
	}
}
