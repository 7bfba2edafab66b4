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

// leaseAlive checks that the lease's key holds the lock and that its etcd
// lease is alive, and returns that lease.
func leaseAlive(t *testing.T, admin *clientv3.Client, prefix string, lease *dlock.Lease) clientv3.LeaseID {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	kv := holderKey(t, admin, prefix, lease.Name())
	if string(kv.Value) != lease.Owner() || uint64(kv.CreateRevision) != lease.Token() {
		t.Errorf("the lock is held by %q = %q rev %d, want the lease's owner %q rev %d", kv.Key, kv.Value, kv.CreateRevision, lease.Owner(), lease.Token())
	}
	id := clientv3.LeaseID(kv.Lease)
	ttl, err := admin.TimeToLive(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if ttl.TTL <= 0 {
		t.Errorf("the lease's key is on lease %x, which is dead (TTL %d)", id, ttl.TTL)
	}
	if err := lease.Err(); err != nil {
		t.Errorf("Err() = %v, want nil", err)
	}
	return id
}

// queuedWaiter is a holder of "job" and a waiter queued behind it, on
// two Lockers of a fresh prefix, with a watch counter on the waiter's
// driver.
type queuedWaiter struct {
	ctx     context.Context
	prefix  string
	w       *dlock.Locker
	counter *watchCounter
	held    *dlock.Lease
	waiter  pending
}

// queueBehind sets up a queuedWaiter, its Lockers with TTL ttl, and returns once
// the waiter's key is queued.
func queueBehind(t *testing.T, eps []string, admin *clientv3.Client, ttl time.Duration) *queuedWaiter {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	q := &queuedWaiter{ctx: ctx, prefix: randomPrefix(), counter: newWatchCounter()}
	h := newLocker(t, eps, q.prefix, dlock.WithTTL(ttl))
	q.w = newLocker(t, eps, q.prefix, dlock.WithTTL(ttl))
	q.counter.install(drv(q.w))
	var err error
	if q.held, err = h.Acquire(ctx, "job"); err != nil {
		t.Fatal(err)
	}
	q.waiter = start(func() (*dlock.Lease, error) { return q.w.Acquire(ctx, "job") })
	waitKeys(t, admin, q.prefix, "job", 2)
	return q
}

// TestWaiterSessionExpires is the fault of etcd-io/etcd#11456 and #19597:
// a waiter whose lease dies while it waits must never report a lock on the
// dead lease. It queues again with a new session instead.
func TestWaiterSessionExpires(t *testing.T) {
	eps := testenv.EtcdEndpoints(t)
	admin := testenv.EtcdClient(t, eps)

	// Revoked, and the holder released before the waiter's keep-alive can
	// notice (30s TTL: keep-alives 10s apart): the waiter finds its key
	// gone in its post-wait check.
	t.Run("RevokedThenReleased", func(t *testing.T) {
		q := queueBehind(t, eps, admin, 30*time.Second)
		resp, err := admin.Get(q.ctx, q.prefix+"/job/#", clientv3.WithLastCreate()...)
		if err != nil {
			t.Fatal(err)
		}
		dead := clientv3.LeaseID(resp.Kvs[0].Lease)
		deadRev := resp.Kvs[0].CreateRevision
		if _, err := admin.Revoke(q.ctx, dead); err != nil {
			t.Fatal(err)
		}
		if err := q.held.Release(q.ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case lease := <-q.waiter.lease:
			if id := leaseAlive(t, admin, q.prefix, lease); id == dead {
				t.Errorf("the waiter reports a lock on its revoked lease %x", dead)
			}
			if lease.Token() <= uint64(deadRev) {
				t.Errorf("token %d, want above the dead key's revision %d: a new key", lease.Token(), deadRev)
			}
			if n := q.counter.requeues.Load(); n == 0 {
				t.Error("the waiter did not queue again after its key was gone")
			}
			_ = lease.Release(q.ctx)
		case err := <-q.waiter.err:
			t.Logf("the waiter returned an error, which is allowed: %v", err)
		case <-q.ctx.Done():
			t.Fatal("the waiter never returned")
		}
	})

	// Revoked while the holder keeps the lock: the waiter's keep-alive finds
	// the lease gone and the waiter queues again at once, with a new
	// session, without waiting for the holder (#19597).
	t.Run("RevokedWhileWaiting", func(t *testing.T) {
		const ttl = 3 * time.Second
		q := queueBehind(t, eps, admin, ttl)
		dead := etcdlock.SessionLease(drv(q.w), ttl)
		if _, err := admin.Revoke(q.ctx, dead); err != nil {
			t.Fatal(err)
		}
		revoked := time.Now()
		for q.counter.requeues.Load() == 0 || countKeys(t, admin, q.prefix, "job") != 2 {
			// A hang bound, over 10× the keep-alive period TTL/3 that
			// finds the lease gone; the holder keeps the lock meanwhile.
			if time.Since(revoked) > 15*time.Second {
				t.Fatal("the waiter did not queue again within 15s of its lease's revocation")
			}
			time.Sleep(5 * time.Millisecond)
		}
		t.Logf("the waiter queued again %v after its lease was revoked", time.Since(revoked))
		if id := etcdlock.SessionLease(drv(q.w), ttl); id == dead || id == 0 {
			t.Errorf("the waiter's session lease is %x, want a new one (revoked %x)", id, dead)
		}
		q.waiter.notYet(t, "the waiter, while the holder holds the lock,")
		if err := q.held.Release(q.ctx); err != nil {
			t.Fatal(err)
		}
		lease := q.waiter.get(t, "the waiter")
		if id := leaseAlive(t, admin, q.prefix, lease); id == dead {
			t.Errorf("the waiter reports a lock on its revoked lease %x", dead)
		}
		_ = lease.Release(q.ctx)
	})

	// The waiter's key alone is deleted (its session lives): after the
	// holder's release the waiter finds its key gone and queues again.
	t.Run("KeyDeleted", func(t *testing.T) {
		q := queueBehind(t, eps, admin, dlock.DefaultTTL)
		resp, err := admin.Get(q.ctx, q.prefix+"/job/#", clientv3.WithLastCreate()...)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := admin.Delete(q.ctx, string(resp.Kvs[0].Key)); err != nil {
			t.Fatal(err)
		}
		if err := q.held.Release(q.ctx); err != nil {
			t.Fatal(err)
		}
		lease := q.waiter.get(t, "the waiter")
		leaseAlive(t, admin, q.prefix, lease)
		if lease.Token() <= uint64(resp.Kvs[0].CreateRevision) {
			t.Errorf("token %d, want a new key's, above %d", lease.Token(), resp.Kvs[0].CreateRevision)
		}
		if q.counter.requeues.Load() != 1 {
			t.Errorf("%d re-queues, want 1", q.counter.requeues.Load())
		}
		_ = lease.Release(q.ctx)
	})
}

// TestCrashedHolderLearnsFirst: when a holder's process stops talking to
// etcd, its Done closes before another client can take the lock: the
// driver counts its lease's validity from the keep-alive's sending.
func TestCrashedHolderLearnsFirst(t *testing.T) {
	eps := testenv.EtcdEndpoints(t)
	prefix := randomPrefix()
	ctx := locktest.Context(t, 30*time.Second)
	for _, ttl := range []time.Duration{time.Second, 3 * time.Second} {
		a := newLocker(t, eps, prefix, dlock.WithTTL(ttl))
		b := newLocker(t, eps, prefix, dlock.WithTTL(ttl))
		lease := locktest.Must(t)(a.Acquire(ctx, "crash"))
		var lostAt atomic.Int64
		go func() {
			<-lease.Done()
			lostAt.Store(time.Now().UnixNano())
		}()
		time.Sleep(ttl / 2) // crash between two keep-alives
		_ = drv(a).Client().Close()
		crashed := time.Now()
		other := locktest.Must(t)(b.Acquire(ctx, "crash"))
		gotAt := time.Now()
		lost := lostAt.Load()
		if lost == 0 {
			t.Errorf("TTL %v: another client acquired %v after the crash, before the holder's Done closed", ttl, gotAt.Sub(crashed))
		} else {
			t.Logf("TTL %v: holder learned %v after the crash; the other client acquired %v later",
				ttl, time.Unix(0, lost).Sub(crashed), gotAt.Sub(time.Unix(0, lost)))
		}
		if !errors.Is(lease.Err(), dlock.ErrLost) {
			t.Errorf("Err() = %v, want ErrLost", lease.Err())
		}
		_ = other.Release(ctx)
	}
}

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
	ctx := locktest.Context(t, 30*time.Second)

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
