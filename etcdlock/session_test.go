package etcdlock_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/etcdlock"
	"github.com/dlockgo/dlock/internal/testenv"
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
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, ttl := range []time.Duration{time.Second, 3 * time.Second} {
		a := newLocker(t, eps, prefix, dlock.WithTTL(ttl))
		b := newLocker(t, eps, prefix, dlock.WithTTL(ttl))
		lease, err := a.Acquire(ctx, "crash")
		if err != nil {
			t.Fatal(err)
		}
		var lostAt atomic.Int64
		go func() {
			<-lease.Done()
			lostAt.Store(time.Now().UnixNano())
		}()
		time.Sleep(ttl / 2) // crash between two keep-alives
		_ = drv(a).Client().Close()
		crashed := time.Now()
		other, err := b.Acquire(ctx, "crash")
		if err != nil {
			t.Fatal(err)
		}
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
