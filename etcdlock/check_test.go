package etcdlock_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/etcdlock"
	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/locktest"
)

// owner returns a fresh owner value, as dlock makes them.
func owner() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// TestCheckDeadline: every kind of grant carries a Check that says "held"
// while keep-alives are answered, and "lost" from the session's own
// deadline on, without the session's goroutine having to run (a test hook
// blocks it, as a SIGSTOP would block the whole holder), and before the
// server expires the lease and another client could take the lock.
func TestCheckDeadline(t *testing.T) {
	eps := testenv.EtcdEndpoints(t)
	admin := testenv.EtcdClient(t, eps)
	prefix := randomPrefix()
	d := etcdlock.NewDriver(testenv.EtcdClient(t, eps), &etcdlock.Options{Prefix: prefix})
	t.Cleanup(func() { _ = d.Close() })
	var stop atomic.Bool
	release := make(chan struct{})
	t.Cleanup(func() { close(release) }) // runs before d.Close, which waits for the goroutine
	etcdlock.SetKeepAliveHook(d, func(ctx context.Context) {
		if stop.Load() {
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	const ttl = 2 * time.Second
	reqs := []driver.Request{
		{Name: "mutex", Mode: driver.Exclusive},
		{Name: "rw", Mode: driver.Read},
		{Name: "rw2", Mode: driver.Write},
		{Name: "sem", Mode: driver.Permit, Limit: 2},
		{Name: "elect", Mode: driver.Leader, Value: "me"},
	}
	grants := make([]driver.Grant, len(reqs))
	for i := range reqs {
		reqs[i].Owner, reqs[i].TTL = owner(), ttl
		g, err := d.TryLock(ctx, reqs[i])
		if err != nil {
			t.Fatalf("TryLock %s: %v", reqs[i].Mode, err)
		}
		if g.Check == nil {
			t.Fatalf("the %s grant has no Check: a lease's Err cannot see the session's deadline", reqs[i].Mode)
		}
		grants[i] = g
	}
	lost0 := locktest.LostCh(grants[0])
	lease := etcdlock.SessionLease(d, ttl)
	ttlResp, err := admin.TimeToLive(ctx, lease)
	if err != nil {
		t.Fatal(err)
	}
	granted := time.Duration(ttlResp.GrantedTTL) * time.Second

	// Keep-alives answered: Check stays nil past the lease's first TTL, so
	// the deadline moves with them.
	time.Sleep(granted * 3 / 2)
	for i, g := range grants {
		if err := g.Check(time.Now()); err != nil {
			t.Fatalf("%s: Check %v after the grant, keep-alives answered: %v, want nil", reqs[i].Mode, granted*3/2, err)
		}
	}

	// dlock calls Check on every Lease.Err: it must not allocate.
	if n := testing.AllocsPerRun(1000, func() { _ = grants[0].Check(time.Now()) }); n != 0 {
		t.Errorf("Check allocates %v times per call while it returns nil, want 0", n)
	}

	// Watch for the server's deletion of the session's keys: the lease's
	// expiry, after which another client can take the locks.
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	deleted := make(chan time.Time, 1)
	wch := admin.Watch(wctx, prefix+"/", clientv3.WithPrefix())
	go func() {
		for resp := range wch {
			for _, ev := range resp.Events {
				if ev.Type == mvccpb.DELETE {
					deleted <- time.Now()
					return
				}
			}
		}
	}()
	if _, err := admin.Get(ctx, "sync"); err != nil { // the watch is set up once a later request is answered
		t.Fatal(err)
	}

	stop.Store(true) // the next keep-alive, and the goroutine, wait in the hook
	var lostAt time.Time
	for deadline := time.Now().Add(2 * granted); lostAt.IsZero(); time.Sleep(time.Millisecond) {
		now := time.Now()
		if now.After(deadline) {
			t.Fatalf("Check still nil %v after keep-alives stopped", 2*granted)
		}
		if err := grants[0].Check(now); err != nil {
			if !errors.Is(err, dlock.ErrLost) {
				t.Errorf("Check = %v, want an error matching ErrLost", err)
			}
			lostAt = now
		}
	}
	select {
	case <-lost0:
		t.Fatal("the loss was signalled although the session's goroutine is blocked: the test did not test Check alone")
	default:
	}
	for i, g := range grants {
		if err := g.Check(time.Now()); err == nil || !strings.Contains(err.Error(), "keep-alive") {
			t.Errorf("%s: Check after the deadline = %v, want the session's expiry", reqs[i].Mode, err)
		}
	}
	select {
	case delAt := <-deleted:
		if !lostAt.Before(delAt) {
			t.Fatalf("Check said lost at %v, after the server deleted the keys (seen at %v): not conservative", lostAt, delAt)
		}
		t.Logf("Check said lost %v before the server's deletion of the keys was seen", delAt.Sub(lostAt))
	case <-time.After(10 * granted): // a hang bound, 10× the lease's TTL
		t.Fatal("the server never expired the lease")
	}
	if err := grants[0].Check(time.Now()); err == nil {
		t.Error("Check nil again after it failed: it must go on failing")
	}

	// With the old session past its deadline but not ended by its
	// goroutine, a new acquisition must not join it, or it would be lost
	// at once: it gets a new lease.
	r := driver.Request{Name: "after", Owner: owner(), TTL: ttl}
	g, err := d.TryLock(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	if now := etcdlock.SessionLease(d, ttl); now == lease {
		t.Errorf("the acquisition after the deadline joined the expired session %x", lease)
	}
	if err := g.Check(time.Now()); err != nil {
		t.Errorf("Check of the new session's lock = %v, want nil", err)
	}
}
