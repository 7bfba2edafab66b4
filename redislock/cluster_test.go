package redislock

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/internal/testenv"
)

// startCluster starts a Redis Cluster of three primaries with a replica
// each on free loopback ports and returns a cluster client of it. In
// cluster mode the server rejects scripts whose keys span slots, so this
// checks the key tagging for real, and Inspect must scan every primary.
func startCluster(t *testing.T) *redis.ClusterClient {
	t.Helper()
	cs := testenv.StartRedisCluster(t, testenv.ClusterOptions{})
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cs.Addrs()})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestCluster(t *testing.T) {
	c := startCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	// The server itself refuses keys of two slots in one script.
	err := c.Eval(ctx, "return 1", []string{"{a}", "{b}"}).Err()
	if err == nil || !strings.Contains(err.Error(), "CROSSSLOT") {
		t.Fatalf("cross-slot script: %v, want a CROSSSLOT error: the check below would prove nothing", err)
	}

	d := newDriverOn(t, c, nil)
	w := newDriverOn(t, c, quietOptions(d))
	name := "cluster/orders/42"
	h := request(name, 10*time.Second)
	g, err := d.TryLock(ctx, h)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Renew(ctx, h); err != nil {
		t.Fatal(err)
	}
	r := request(name, quietTTL) // re-checks 30 s apart
	res := lockAsync(ctx, w, r)
	waitQueued(t, d, name, 1)
	wg, lat := unlockThenLock(t, d, h, res)
	t.Logf("handoff on a cluster: %v after the release", lat)
	if wg.Token != g.Token+1 {
		t.Errorf("token %d, want %d", wg.Token, g.Token+1)
	}
	if lat > messageBound {
		t.Errorf("handoff took %v, with re-checks every %v: the grant did not come by message", lat, w.entryLifetime(r.TTL)/3)
	}
	// The waiter's shard subscription ended with its wait.
	w.subs.mu.Lock()
	subs := len(w.subs.subs)
	w.subs.mu.Unlock()
	if subs != 0 {
		t.Errorf("%d shard subscriptions left after the wait", subs)
	}
	// An observer of an election on w learns of a leader elected through
	// d by message, long before any timer of its own would read again.
	ch, err := w.Observe(ctx, "cluster/leader")
	if err != nil {
		t.Fatal(err)
	}
	if info, _ := next(t, ch, time.Second); info != (driver.LeaderInfo{}) {
		t.Fatalf("first value %+v, want no leader", info)
	}
	time.Sleep(100 * time.Millisecond) // the subscription's confirmation is read
	lr := request("cluster/leader", 10*time.Second)
	lr.Mode, lr.Value = driver.Leader, "node-a"
	lg, err := d.TryLock(ctx, lr)
	if err != nil {
		t.Fatal(err)
	}
	elected := time.Now()
	if info, at := next(t, ch, time.Second); info.Value != "node-a" || info.Token != lg.Token {
		t.Errorf("observed %+v, want node-a with token %d", info, lg.Token)
	} else {
		t.Logf("observer saw the new leader %v after its election", at.Sub(elected))
	}
	if err := d.Unlock(ctx, lr); err != nil {
		t.Fatal(err)
	}
	if info, _ := next(t, ch, time.Second); info != (driver.LeaderInfo{}) {
		t.Errorf("observed %+v after the resignation, want no leader", info)
	}
	// On Redis 7 the grant and the election's changes went by SPUBLISH to
	// the name's slot, not by PUBLISH to every node.
	if n := commandCalls(t, c, "spublish"); n < 3 {
		t.Errorf("%d SPUBLISH on the primaries after a handoff and two changes of leader, want 3", n)
	}
	if n := commandCalls(t, c, "publish"); n != 0 {
		t.Errorf("%d PUBLISH on the primaries: grants should go by SPUBLISH", n)
	}
	// Inspect scans every master and reads keys of several slots: the
	// mutex w holds and a reader of another name.
	rr := request("cluster/rw", 10*time.Second)
	rr.Mode = driver.Read
	rg, err := d.TryLock(ctx, rr)
	if err != nil {
		t.Fatal(err)
	}
	infos, err := d.Inspect(ctx, "cluster/")
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 2 || infos[0].Name != name || infos[0].Mode != driver.Exclusive || infos[0].Token != wg.Token ||
		infos[1].Name != "cluster/rw" || infos[1].Mode != driver.Read || infos[1].Token != rg.Token {
		t.Errorf("Inspect on a cluster = %+v, want %s (token %d) and a reader of cluster/rw (token %d)", infos, name, wg.Token, rg.Token)
	}
	if err := d.Unlock(ctx, rr); err != nil {
		t.Fatal(err)
	}
	if err := w.Unlock(ctx, r); err != nil {
		t.Fatal(err)
	}
	t.Run("LayoutRedsync", func(t *testing.T) { clusterPlain(t, ctx, c) })
}

// clusterPlain: in layout=redsync on a cluster, the plain key and dlock's
// counter share a slot (a script on both would fail CROSSSLOT otherwise),
// for names all over the slots; a waiter is woken by SPUBLISH in the
// lock's slot; Inspect scans every primary.
func clusterPlain(t *testing.T, ctx context.Context, c *redis.ClusterClient) {
	d := plainDriver(t, c, Options{PollInterval: time.Minute})
	w := plainDriver(t, c, Options{Prefix: d.prefix, PollInterval: time.Minute})
	slots := map[uint16]bool{}
	for i := range 20 {
		name := "plain/" + strconv.Itoa(i)
		r := request(name, 10*time.Second)
		if _, err := d.TryLock(ctx, r); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if _, err := d.Renew(ctx, r); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		mustUnlock(t, d, r)
		lock, _ := d.plainKeys(name)
		slots[keySlot(lock)] = true
	}
	if len(slots) < 10 {
		t.Errorf("20 names in %d slots", len(slots))
	}
	spublish, publish := commandCalls(t, c, "spublish"), commandCalls(t, c, "publish")
	name := "plain/wait"
	h := request(name, 10*time.Second)
	g, err := d.TryLock(ctx, h)
	if err != nil {
		t.Fatal(err)
	}
	res := lockAsync(ctx, w, request(name, 10*time.Second))
	waitFollowing(t, w, name)
	time.Sleep(20 * time.Millisecond) // the attempt after the confirmation has failed
	wg, lat := unlockThenLock(t, d, h, res)
	t.Logf("layout=redsync on a cluster: taken %v after the release", lat)
	if lat > messageBound || wg.Token <= g.Token {
		t.Errorf("taken %v after the release (polls a minute apart), token %d after %d", lat, wg.Token, g.Token)
	}
	if n := commandCalls(t, c, "spublish") - spublish; n < 1 {
		t.Errorf("%d SPUBLISH for the release", n)
	}
	if n := commandCalls(t, c, "publish") - publish; n != 0 {
		t.Errorf("%d PUBLISH: releases should go by SPUBLISH", n)
	}
	infos, err := d.Inspect(ctx, "plain/")
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 1 || infos[0].Name != name || infos[0].Owner == h.Owner {
		t.Errorf("Inspect = %+v, want %s held by the waiter", infos, name)
	}
}

// commandCalls sums the calls of command (as INFO commandstats names it)
// over the cluster's primaries.
func commandCalls(t *testing.T, c *redis.ClusterClient, command string) int {
	t.Helper()
	var mu sync.Mutex
	total := 0
	err := c.ForEachMaster(t.Context(), func(ctx context.Context, m *redis.Client) error {
		info, err := m.Info(ctx, "commandstats").Result()
		if err != nil {
			return err
		}
		for _, line := range strings.Split(info, "\n") {
			rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+command+":calls=")
			if !ok {
				continue
			}
			n, _ := strconv.Atoi(rest[:strings.IndexByte(rest+",", ',')])
			mu.Lock()
			total += n
			mu.Unlock()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return total
}
