package natslock_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/locktest"
	"github.com/dlockgo/dlock/natslock"
)

// randomBucket keeps tests apart on one server.
func randomBucket() string { return "test-" + locktest.RandomHex(4) }

var (
	ctxTimeout = locktest.Context
	request    = locktest.Request // the mutex name with a fresh owner
)

// newLocker returns a Locker on a connection of its own, as another
// process would have; both are closed when t ends.
func newLocker(t testing.TB, c *testenv.NATSCluster, o *natslock.Options, opts ...dlock.Option) *dlock.Locker {
	t.Helper()
	return locktest.Opened(t)(natslock.NewConn(ctxTimeout(t, 30*time.Second), c.Conn(t), o, opts...))
}

// newDriver returns a driver on a connection of its own, closed when t
// ends.
func newDriver(t testing.TB, c *testenv.NATSCluster, o *natslock.Options) *natslock.Driver {
	t.Helper()
	d, err := natslock.NewDriver(ctxTimeout(t, 30*time.Second), jetStream(t, c), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

// jetStream returns JetStream on a connection of its own.
func jetStream(t testing.TB, c *testenv.NATSCluster) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(c.Conn(t))
	if err != nil {
		t.Fatal(err)
	}
	return js
}

func drv(l *dlock.Locker) *natslock.Driver { return l.Driver().(*natslock.Driver) }

// admin returns the bucket through a connection of its own, for looking
// at and changing keys behind the drivers' backs.
func admin(t testing.TB, c *testenv.NATSCluster, bucket string) jetstream.KeyValue {
	t.Helper()
	kv, err := jetStream(t, c).KeyValue(ctxTimeout(t, 10*time.Second), bucket)
	if err != nil {
		t.Fatalf("bucket %q: %v", bucket, err)
	}
	return kv
}

// conformance runs the suite on c with a bucket of replicas servers.
func conformance(t *testing.T, c *testenv.NATSCluster, replicas int) {
	o := &natslock.Options{Bucket: randomBucket(), Replicas: replicas}
	newDriver(t, c, o) // creates the bucket
	runSuite(t, admin(t, c, o.Bucket), func(t *testing.T, opts ...dlock.Option) *dlock.Locker {
		return newLocker(t, c, o, opts...)
	})
}

// runSuite runs the conformance suite over the Lockers of newLocker, on
// the bucket kv, whose keys the takeaways purge.
func runSuite(t *testing.T, kv jetstream.KeyValue, newLocker func(t *testing.T, opts ...dlock.Option) *dlock.Locker) {
	locktest.Run(t, locktest.Harness{
		NewLocker: newLocker,
		TakeAway: func(t *testing.T, name string) {
			if err := kv.Purge(ctxTimeout(t, 10*time.Second), "mutex."+natslock.EncodeName(name)); err != nil {
				t.Fatalf("purge %q: %v", name, err)
			}
		},
		// The server keeps a key's TTL in whole seconds.
		TTL: time.Second,
	})
}

// TestConformance runs the conformance suite on one server.
func TestConformance(t *testing.T) {
	conformance(t, testenv.StartNATS(t, 1), 1)
}

// TestConformanceCluster runs the conformance suite on a 3-server
// cluster with a bucket replicated on all three.
func TestConformanceCluster(t *testing.T) {
	conformance(t, testenv.StartNATS(t, 3), 3)
}

// TestStreamLeaderKill runs 8 contenders over 4 clients on one lock of an
// R3 bucket on a 3-server cluster, kills the bucket stream's leader
// (SIGKILL) mid-run, and later brings it back (locktest.RunLeaderKill).
// Throughout, no two contenders hold the lock at once and the tokens
// increase in critical-section order; it reports how long the cluster
// took to elect a stream leader, to grant a free lock (a TryAcquire
// probe), and to hand the contended lock on.
func TestStreamLeaderKill(t *testing.T) {
	c := testenv.StartNATS(t, 3)
	o := &natslock.Options{Bucket: randomBucket(), Replicas: 3, RequestTimeout: time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), 240*time.Second)
	defer cancel()
	const ttl = 5 * time.Second
	lockers := make([]*dlock.Locker, 4)
	for i := range lockers {
		lockers[i] = newLocker(t, c, o, dlock.WithTTL(ttl))
	}
	js := jetStream(t, c)
	stream := "KV_" + o.Bucket
	var leader *testenv.NATSServer
	locktest.RunLeaderKill(t, ctx, locktest.LeaderKill{
		Lockers: lockers,
		// A client made before the kill: binding the bucket reads its
		// stream's information, which nobody answers until a leader is
		// elected.
		Probe: newLocker(t, c, o, dlock.WithTTL(ttl)),
		Name:  "leader-kill",
		Kill: func(t *testing.T) string {
			if leader = c.StreamLeader(ctx, js, stream); leader == nil {
				t.Fatal("no leader for the bucket's stream")
			}
			leader.Kill()
			return leader.String()
		},
		NewLeader: func(t *testing.T) string {
			for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
				if s := c.StreamLeader(ctx, js, stream); s != nil {
					return s.String()
				}
			}
			return "none"
		},
		Restart: func(t *testing.T) { leader.Start() },
		// A stream's servers elect a new leader after 4 to 9 seconds
		// without one (nats-server's Raft timeouts, not configurable);
		// the contended lock then waits for the contenders' next try
		// (up to a second after an error) and a request timeout. Hang
		// bounds, 10× that.
		Bound:      100 * time.Second,
		StallBound: 100 * time.Second,
		Warmup:     2 * time.Second,
		Rejoin:     3 * time.Second,
		After:      3 * time.Second,
	})
}

// TestServerRestart kills the only server (SIGKILL) and starts it again
// on its store: tokens granted after the restart are above every token
// granted before, and a lease held across a restart shorter than its TTL
// is still held, renewed, afterwards.
func TestServerRestart(t *testing.T) {
	c := testenv.StartNATS(t, 1)
	o := &natslock.Options{Bucket: randomBucket()}
	l := newLocker(t, c, o, dlock.WithTTL(5*time.Second))
	ctx := ctxTimeout(t, 60*time.Second)
	var last uint64
	for range 5 {
		lease, err := l.Acquire(ctx, "restart/x")
		if err != nil {
			t.Fatal(err)
		}
		last = lease.Token()
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	held, err := l.Acquire(ctx, "restart/held")
	if err != nil {
		t.Fatal(err)
	}
	c.Servers[0].Kill()
	time.Sleep(500 * time.Millisecond)
	c.Servers[0].Start()
	restarted := time.Now()

	lease, err := l.Acquire(ctx, "restart/x")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("granted %v after the restart, token %d (last before: %d)", time.Since(restarted), lease.Token(), last)
	if lease.Token() <= max(last, held.Token()) {
		t.Errorf("token %d after the restart is not above %d, granted before", lease.Token(), max(last, held.Token()))
	}
	_ = lease.Release(ctx)

	time.Sleep(6 * time.Second) // past the TTL: only renewals keep it
	if err := held.Err(); err != nil {
		t.Errorf("the lease held across the restart: %v", err)
	}
	other := newLocker(t, c, o)
	if lease, err := other.TryAcquire(ctx, "restart/held"); err == nil {
		_ = lease.Release(ctx)
		t.Error("another client took the lock held across the restart")
	}
	if err := held.Release(ctx); err != nil {
		t.Errorf("Release of the lease held across the restart: %v", err)
	}
}

// TestRequestsPerOperation counts the messages each operation sends on
// the driver's own connection: an acquisition of a free key whose marker
// the driver knows, a renewal and a release are one request each; a
// failed TryLock is two (the refused write, a read of the holder); the
// first acquisition of a key another driver released is three.
func TestRequestsPerOperation(t *testing.T) {
	c := testenv.StartNATS(t, 1)
	o := &natslock.Options{Bucket: randomBucket()}
	ctx := ctxTimeout(t, 30*time.Second)
	nc := c.Conn(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	d, err := natslock.NewDriver(ctx, js, o)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	other := newDriver(t, c, o)
	count := func(what string, want uint64, op func() error) {
		t.Helper()
		before := nc.Stats().OutMsgs
		if err := op(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if got := nc.Stats().OutMsgs - before; got != want {
			t.Errorf("%s sent %d requests, want %d", what, got, want)
		}
	}
	r := request("count", 10*time.Second)
	count("TryLock of a new key", 1, func() error { _, err := d.TryLock(ctx, r); return err })
	count("Renew", 1, func() error { _, err := d.Renew(ctx, r); return err })
	count("TryLock of a held key", 2, func() error {
		if _, err := d.TryLock(ctx, request("count", 10*time.Second)); err == nil {
			t.Error("TryLock of a held key succeeded")
		}
		return nil
	})
	count("Unlock", 1, func() error { return d.Unlock(ctx, r) })
	r = request("count", 10*time.Second)
	count("TryLock after its own release", 1, func() error { _, err := d.TryLock(ctx, r); return err })
	count("Unlock", 1, func() error { return d.Unlock(ctx, r) })
	// Another driver released it: the marker's revision is news here.
	h := request("count", 10*time.Second)
	if _, err := other.TryLock(ctx, h); err != nil {
		t.Fatal(err)
	}
	if err := other.Unlock(ctx, h); err != nil {
		t.Fatal(err)
	}
	count("TryLock after another's release", 3, func() error {
		_, err := d.TryLock(ctx, request("count", 10*time.Second))
		return err
	})
}

// TestTTLRoundsUp: the key's TTL is the lease's rounded up to whole
// seconds, the lease's validity the TTL asked for.
func TestTTLRoundsUp(t *testing.T) {
	c := testenv.StartNATS(t, 1)
	o := &natslock.Options{Bucket: randomBucket()}
	d := newDriver(t, c, o)
	ctx := ctxTimeout(t, 30*time.Second)
	s, err := jetStream(t, c).Stream(ctx, "KV_"+o.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		ttl  time.Duration
		want string
	}{{300 * time.Millisecond, "1"}, {time.Second, "1"}, {1500 * time.Millisecond, "2"}, {30 * time.Second, "30"}} {
		r := request("ttl", tc.ttl)
		start := time.Now()
		g, err := d.TryLock(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		if g.Expires.After(time.Now().Add(tc.ttl)) || g.Expires.Before(start.Add(tc.ttl)) {
			t.Errorf("TTL %v: Expires %v from the start, want the TTL asked for", tc.ttl, g.Expires.Sub(start))
		}
		m, err := s.GetLastMsgForSubject(ctx, "$KV."+o.Bucket+".mutex.ttl")
		if err != nil {
			t.Fatal(err)
		}
		if got := m.Header.Get(jetstream.MsgTTLHeader); got != tc.want {
			t.Errorf("TTL %v: the key's Nats-TTL is %q, want %q", tc.ttl, got, tc.want)
		}
		if err := d.Unlock(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
}
