package redislock

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/internal/testenv"
)

// startReplica starts a redis-server replicating primary and waits until
// it is in sync.
func startReplica(t testing.TB, primary *testenv.RedisServer) *testenv.RedisServer {
	t.Helper()
	replica := testenv.StartRedis(t, testenv.RedisOptions{})
	c := replica.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Send the first full copy at once rather than after the default 5s.
	if err := primary.Client().ConfigSet(ctx, "repl-diskless-sync-delay", "0").Err(); err != nil {
		t.Fatal(err)
	}
	host, port, _ := strings.Cut(primary.Addr, ":")
	if err := c.Do(ctx, "REPLICAOF", host, port).Err(); err != nil {
		t.Fatal(err)
	}
	for {
		info, err := c.Info(ctx, "replication").Result()
		if err == nil && strings.Contains(info, "master_link_status:up") {
			return replica
		}
		if ctx.Err() != nil {
			t.Fatalf("the replica did not sync: %v\n%s", err, info)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestWaitReplicas: with WaitReplicas, a grant that returns is on the
// replica already, by TryLock and by a handoff to a waiter; a renewal
// fails without the replica's acknowledgement; and with more replicas
// asked for than there are the acquisition fails and leaves the lock
// free.
func TestWaitReplicas(t *testing.T) {
	primary := testenv.StartRedis(t, testenv.RedisOptions{})
	replica := startReplica(t, primary).Client()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d := newDriverOn(t, primary.Client(), &Options{WaitReplicas: 1})

	onReplica := func(name, owner string) bool {
		v, err := replica.Get(ctx, d.keys(name)[0]).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			t.Fatal(err)
		}
		return v == owner
	}
	for i := range 20 { // the race without WAIT would be lost now and then
		r := request("repl", 10*time.Second)
		if _, err := d.TryLock(ctx, r); err != nil {
			t.Fatal(err)
		}
		if !onReplica("repl", r.Owner) {
			t.Fatalf("acquisition %d returned before the replica had it", i)
		}
		if err := d.Unlock(ctx, r); err != nil {
			t.Fatal(err)
		}
	}

	// A handoff: the grant is written by the releaser's script.
	h := request("handoff", 10*time.Second)
	if _, err := d.TryLock(ctx, h); err != nil {
		t.Fatal(err)
	}
	w := request("handoff", 10*time.Second)
	res := lockAsync(ctx, d, w)
	waitQueued(t, d, "handoff", 1)
	if err := d.Unlock(ctx, h); err != nil {
		t.Fatal(err)
	}
	if got := <-res; got.err != nil {
		t.Fatal(got.err)
	}
	if !onReplica("handoff", w.Owner) {
		t.Fatal("a handed-over lock returned before the replica had it")
	}

	// Kinds other than the mutex renew with their own script.
	p := request("sem", 10*time.Second)
	p.Mode, p.Limit = driver.Permit, 2
	if _, err := d.TryLock(ctx, p); err != nil {
		t.Fatalf("permit with WaitReplicas: %v", err)
	}

	// A renewal waits for the replica too: acknowledged, it extends the
	// lock; with the replica gone, it fails with ErrNotReplicated (not
	// ErrNotHeld: the lock is still there) and reports no new validity.
	rn := request("renew", 10*time.Second)
	if _, err := d.TryLock(ctx, rn); err != nil {
		t.Fatal(err)
	}
	if until, err := d.Renew(ctx, rn); err != nil || time.Until(until) < 9*time.Second {
		t.Fatalf("acknowledged renewal: until %v from now, %v", time.Until(until), err)
	}
	if err := replica.Do(ctx, "REPLICAOF", "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	short := newDriverOn(t, primary.Client(), &Options{Prefix: d.prefix, WaitReplicas: 1, WaitTimeout: 100 * time.Millisecond})
	waitDetached(t, primary)
	until, err := short.Renew(ctx, rn)
	if !errors.Is(err, ErrNotReplicated) || errors.Is(err, driver.ErrNotHeld) || !until.IsZero() {
		t.Fatalf("renewal without its replica: until %v, %v; want ErrNotReplicated only", until, err)
	}

	two := newDriverOn(t, primary.Client(), &Options{Prefix: d.prefix, WaitReplicas: 2, WaitTimeout: 100 * time.Millisecond})
	r := request("two", 10*time.Second)
	start := time.Now()
	_, err = two.TryLock(ctx, r)
	if !errors.Is(err, ErrNotReplicated) {
		t.Fatalf("two replicas asked, one there: got %v, want ErrNotReplicated", err)
	}
	if el := time.Since(start); el < 100*time.Millisecond {
		t.Errorf("failed after %v, before the wait timeout", el)
	}
	if n, err := primary.Client().Exists(ctx, d.keys("two")[0]).Result(); err != nil || n != 0 {
		t.Fatalf("the unreplicated lock was left held (exists %d, %v)", n, err)
	}
}

// TestWaitReplicasDefault: with Options.WaitReplicas zero a Driver waits
// for one replica where the primary has one (a grant that returns is on
// the replica), and for none where it has none or the wait is off.
func TestWaitReplicasDefault(t *testing.T) {
	primary := testenv.StartRedis(t, testenv.RedisOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	take := func(d *Driver, name string) driver.Request {
		t.Helper()
		r := request(name, 10*time.Second)
		if _, err := d.TryLock(ctx, r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	alone := newDriverOn(t, primary.Client(), nil)
	alone.reaskAfter = 100 * time.Millisecond
	take(alone, "alone")
	if n := alone.waitReplicas.Load(); n != 0 {
		t.Fatalf("a primary without replicas: waits for %d", n)
	}

	replica := startReplica(t, primary).Client()
	// The Driver that found none asks again: its grants wait from then on.
	for i := 0; ; i++ {
		r := take(alone, "alone-later")
		if err := alone.Unlock(ctx, r); err != nil {
			t.Fatal(err)
		}
		if alone.waitReplicas.Load() == 1 {
			break
		}
		if i == 100 { // 10 s: a hundred times the interval
			t.Fatal("a Driver that found no replica never asked again after one attached")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := primary.Client().ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	r := take(alone, "alone-later")
	if err := alone.Unlock(ctx, r); err != nil {
		t.Fatal(err)
	}
	if stats := primary.Client().Info(ctx, "commandstats").Val(); !strings.Contains(stats, "cmdstat_wait:") {
		t.Fatal("a grant after the Driver learnt of the replica sent no WAIT")
	}
	d := newDriverOn(t, primary.Client(), nil)
	for i := range 20 { // the race without WAIT would be lost now and then
		if i%5 == 4 {
			// The server forgets the scripts: the grant's WAIT pipeline
			// sends EVALSHA, meets NOSCRIPT and sends EVAL.
			if err := primary.Client().ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
		}
		r := take(d, "default")
		if n := d.waitReplicas.Load(); n != 1 {
			t.Fatalf("a primary with a replica: waits for %d, want 1", n)
		}
		if v, err := replica.Get(ctx, d.keys("default")[0]).Result(); err != nil || v != r.Owner {
			t.Fatalf("acquisition %d returned before the replica had it (%q, %v)", i, v, err)
		}
		if err := d.Unlock(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	off := newDriverOn(t, primary.Client(), &Options{WaitReplicas: -1})
	take(off, "off")
	if n := off.waitReplicas.Load(); n != 0 {
		t.Fatalf("the wait turned off: waits for %d", n)
	}
}

func TestWaitOptionsFromURL(t *testing.T) {
	o, err := driverOptions(parseURL(t, "redis://127.0.0.1:6379?wait_replicas=2&wait_timeout=250ms"))
	if err != nil {
		t.Fatal(err)
	}
	if o.WaitReplicas != 2 || o.WaitTimeout != 250*time.Millisecond {
		t.Fatalf("options %+v, want WaitReplicas 2, WaitTimeout 250ms", o)
	}
	for raw, want := range map[string]int{"": 0, "wait_replicas=0": -1, "wait_replicas=1": 1} {
		o, err := driverOptions(parseURL(t, "redis://127.0.0.1:6379?"+raw))
		if err != nil || o.WaitReplicas != want {
			t.Errorf("%q: WaitReplicas %d, %v; want %d (0 the automatic default, -1 off)", raw, o.WaitReplicas, err, want)
		}
	}
	for _, bad := range []string{"wait_replicas=-1", "wait_replicas=x", "wait_timeout=0s"} {
		if _, err := driverOptions(parseURL(t, "redis://127.0.0.1:6379?"+bad)); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
}

func parseURL(t *testing.T, raw string) driver.URL {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return driver.NewURL(u)
}

// waitDetached waits until primary counts no connected replica.
func waitDetached(t *testing.T, primary *testenv.RedisServer) {
	t.Helper()
	c := primary.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		info, err := c.Info(ctx, "replication").Result()
		if err == nil && strings.Contains(info, "connected_slaves:0") {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("the replica stayed attached: %v\n%s", err, info)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
