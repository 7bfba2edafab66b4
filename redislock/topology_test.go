package redislock

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/internal/testenv"
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
	conform(t, admin, LayoutDlock, prefix, func(t *testing.T, opts ...dlock.Option) *dlock.Locker {
		l := openURL(t, rawURL, opts...)
		if _, ok := l.Driver().(*Driver).Client().(*redis.ClusterClient); !ok {
			t.Fatalf("%s opened a %T, want a *redis.ClusterClient", rawURL, l.Driver().(*Driver).Client())
		}
		return l
	})
}

// The conformance suite on a Sentinel-managed primary with two replicas
// and three sentinels, opened by a redis+sentinel:// URL.
func TestSentinelConformance(t *testing.T) {
	ps := testenv.StartSentinel(t, testenv.SentinelOptions{})
	admin := ps.Servers[0].Client()
	prefix := "dlocktest:" + randomHex(6) + ":"
	rawURL := sentinelURL(ps, prefix)
	conform(t, admin, LayoutDlock, prefix, func(t *testing.T, opts ...dlock.Option) *dlock.Locker {
		l := openURL(t, rawURL, opts...)
		if c, ok := l.Driver().(*Driver).Client().(*redis.Client); !ok || c.Options().Addr != "FailoverClient" {
			t.Fatalf("%s opened %v, want a failover client", rawURL, l.Driver().(*Driver).Client())
		}
		return l
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
		// Promptly: within its timeouts (WAIT 300ms, read 1s); ten times
		// their sum only bounds a hang.
		if took > 13*time.Second {
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

// A slot migrated between two primaries while its lock is held and
// waited for: the holder keeps its lock through the move (its renewals
// follow the ASK and MOVED redirections), the waiter is not stranded and
// gets the lock when the holder releases it, with a greater token, and the
// two never hold it at once.
func TestClusterReshard(t *testing.T) {
	cs := testenv.StartRedisCluster(t, testenv.ClusterOptions{})
	admin := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cs.Addrs()})
	t.Cleanup(func() { _ = admin.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rawURL := clusterURL(cs, DefaultPrefix)
	holder, waiter := openURL(t, rawURL), openURL(t, rawURL)
	name := "reshard/" + randomHex(4)
	key := DefaultPrefix + "{" + name + "}"
	slot, from, to := cs.SlotOf(t, key)

	lease, err := holder.Acquire(ctx, name, dlock.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		lease *dlock.Lease
		err   error
		at    time.Time
	}
	got := make(chan result, 1)
	go func() {
		l, err := waiter.Acquire(ctx, name, dlock.WithTTL(time.Second))
		got <- result{l, err, time.Now()}
	}()
	time.Sleep(200 * time.Millisecond) // the waiter queues

	// Move the slot one key at a time, pausing mid-way for longer than
	// the TTL, so that renewals and the waiter's re-checks meet a slot
	// whose keys are split over two primaries.
	err = cs.MoveSlot(ctx, slot, from, to, func(moved int) {
		if moved == 1 {
			time.Sleep(1500 * time.Millisecond)
		}
	})
	if err != nil {
		t.Fatalf("move slot %d from %s to %s: %v", slot, from, to, err)
	}
	time.Sleep(1500 * time.Millisecond) // renewals on the new primary
	select {
	case r := <-got:
		t.Fatalf("the waiter returned while the lock was held: %v, %v", r.lease, r.err)
	default:
	}
	if err := lease.Err(); err != nil {
		t.Fatalf("the holder lost its lock in the move: %v", err)
	}
	dst := redis.NewClient(&redis.Options{Addr: to})
	defer dst.Close()
	if v, err := dst.Get(ctx, key).Result(); err != nil || v != lease.Owner() {
		t.Fatalf("GET %s on %s, the slot's new primary: %q, %v; want the holder", key, to, v, err)
	}
	released := time.Now()
	if err := lease.Release(ctx); err != nil {
		t.Fatalf("release after the move: %v", err)
	}
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatalf("the waiter failed: %v", r.err)
		}
		t.Logf("slot %d moved %s -> %s while held; the waiter got the lock %v after the release", slot, from, to, r.at.Sub(released))
		if r.lease.Token() <= lease.Token() {
			t.Errorf("token %d after %d: not greater", r.lease.Token(), lease.Token())
		}
		_ = r.lease.Release(ctx)
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter did not get the lock within 10s of the release")
	}
}

// Credentials pass through a redis+sentinel:// URL: the user information
// to the data nodes, sentinel_password to the sentinels; a wrong password
// fails Open with an error that does not show it.
func TestSentinelAuth(t *testing.T) {
	const pw = "s3cret-sentinel-pw"
	ps := testenv.StartSentinel(t, testenv.SentinelOptions{Password: pw})
	hosts := strings.Join(ps.SentinelAddrs(), ",")
	good := "redis+sentinel://:" + pw + "@" + hosts + "?master_name=" + testenv.SentinelMaster + "&sentinel_password=" + pw
	l := openURL(t, good)
	ctx := t.Context()
	lease, err := l.TryAcquire(ctx, "auth/"+randomHex(4))
	if err != nil {
		t.Fatalf("TryAcquire through authenticated sentinels: %v", err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{
		"redis+sentinel://:wrong-" + pw + "@" + hosts + "?master_name=" + testenv.SentinelMaster + "&sentinel_password=" + pw + "&dial_timeout=500ms",
		"redis+sentinel://:" + pw + "@" + hosts + "?master_name=" + testenv.SentinelMaster + "&sentinel_password=wrong-" + pw + "&dial_timeout=500ms",
		"redis+sentinel://" + hosts + "?master_name=" + testenv.SentinelMaster + "&dial_timeout=500ms",
	} {
		octx, cancel := context.WithTimeout(ctx, 10*time.Second)
		l, err := dlock.Open(octx, bad)
		cancel()
		if err == nil {
			l.Close()
			t.Errorf("Open with wrong credentials succeeded: %s", driverRedact(bad))
			continue
		}
		if strings.Contains(err.Error(), pw) {
			t.Errorf("the error shows the password: %v", err)
		}
	}
}

// driverRedact hides the test's passwords in its own messages.
func driverRedact(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "?"
	}
	return driver.Redact(u)
}

// The user information of a redis+cluster:// URL authenticates to every
// node, the seeds and those the client finds; a wrong password fails Open
// with an error that does not show it.
func TestClusterAuth(t *testing.T) {
	const pw = "s3cret-cluster-pw"
	cs := testenv.StartRedisCluster(t, testenv.ClusterOptions{Password: pw})
	a := cs.Addrs()
	l := openURL(t, "redis+cluster://:"+pw+"@"+a[0])
	ctx := t.Context()
	for i := range 8 { // names on every primary
		lease, err := l.TryAcquire(ctx, fmt.Sprintf("auth/%s/%d", randomHex(4), i))
		if err != nil {
			t.Fatalf("TryAcquire on an authenticated cluster: %v", err)
		}
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	octx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if l, err := dlock.Open(octx, "redis+cluster://:wrong-"+pw+"@"+a[0]); err == nil {
		l.Close()
		t.Error("Open with a wrong password succeeded")
	} else if strings.Contains(err.Error(), pw) {
		t.Errorf("the error shows the password: %v", err)
	}
}
