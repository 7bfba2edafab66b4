package etcdlock_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/etcdlock"
	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/locktest"
)

// randomPrefix keeps tests apart on a shared server (DLOCK_ETCD_ENDPOINTS).
func randomPrefix() string {
	return "test-" + locktest.RandomHex(4)
}

// newLocker returns a Locker on a client of its own, as another process
// would have; both are closed when t ends.
func newLocker(t testing.TB, eps []string, prefix string, opts ...dlock.Option) *dlock.Locker {
	t.Helper()
	return locktest.Opened(t)(etcdlock.New(testenv.EtcdClient(t, eps), &etcdlock.Options{Prefix: prefix}, opts...))
}

// fixture is what most tests start from: the endpoints of the cluster,
// an admin client, a fresh prefix, and a context that ends after limit
// (a hang bound) or with the test.
func fixture(t *testing.T, limit time.Duration) ([]string, *clientv3.Client, string, context.Context) {
	eps := testenv.EtcdEndpoints(t)
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	t.Cleanup(cancel)
	return eps, testenv.EtcdClient(t, eps), randomPrefix(), ctx
}

func drv(l *dlock.Locker) *etcdlock.Driver { return l.Driver().(*etcdlock.Driver) }

// holderKey returns the key that holds name: the oldest under it. Its
// value is the holder's owner.
func holderKey(t testing.TB, admin *clientv3.Client, prefix, name string) *mvccpb.KeyValue {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := admin.Get(ctx, prefix+"/"+name+"/#", clientv3.WithFirstCreate()...)
	if err != nil {
		t.Fatalf("get the holder's key: %v", err)
	}
	if len(resp.Kvs) == 0 {
		t.Fatalf("no key holds %q", name)
	}
	return resp.Kvs[0]
}

// countKeys returns how many acquisitions hold or wait for name.
func countKeys(t testing.TB, admin *clientv3.Client, prefix, name string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := admin.Get(ctx, prefix+"/"+name+"/#", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatalf("count keys: %v", err)
	}
	return resp.Count
}

// waitKeys waits until n keys hold or wait for name.
func waitKeys(t testing.TB, admin *clientv3.Client, prefix, name string, n int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for countKeys(t, admin, prefix, name) != n {
		if time.Now().After(deadline) {
			t.Fatalf("%q: %d keys, want %d", name, countKeys(t, admin, prefix, name), n)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func TestConformance(t *testing.T) {
	eps := testenv.EtcdEndpoints(t)
	admin := testenv.EtcdClient(t, eps)
	prefix := randomPrefix()
	// An operator deletes the holder's key; the holder learns of it at
	// its session's next keep-alive.
	locktestRun(t, eps, prefix, etcdlock.LayoutDlock, func(t *testing.T, name string) {
		key := holderKey(t, admin, prefix, name).Key
		if _, err := admin.Delete(context.Background(), string(key)); err != nil {
			t.Fatalf("delete %q: %v", key, err)
		}
	})
}

// locktestRun runs the conformance suite on Lockers with prefix and
// layout, each on a client of its own; takeAway deletes the holder's key.
func locktestRun(t *testing.T, eps []string, prefix string, layout etcdlock.Layout, takeAway func(t *testing.T, name string)) {
	locktest.Run(t, locktest.Harness{
		// etcd leases count whole seconds; 1s is the test server's minimum.
		TTL: time.Second,
		NewLocker: func(t *testing.T, opts ...dlock.Option) *dlock.Locker {
			t.Helper()
			l, err := etcdlock.New(testenv.EtcdClient(t, eps), &etcdlock.Options{Prefix: prefix, Layout: layout}, opts...)
			if err != nil {
				t.Fatal(err)
			}
			return l
		},
		TakeAway:        takeAway,
		ElectionIsMutex: layout == etcdlock.LayoutConcurrency,
		// The holder's process dies: its client stops talking to etcd
		// without revoking anything, and its lease runs out on the server.
		Crash: func(t *testing.T, l *dlock.Locker) {
			_ = drv(l).Client().Close()
		},
	})
}

// TestLostWhenLeaseRevoked: revoking the holder's session lease (etcdctl
// lease revoke) frees the lock at once and the holder learns of it at its
// next keep-alive.
func TestLostWhenLeaseRevoked(t *testing.T) {
	eps, admin, prefix, ctx := fixture(t, 20*time.Second)
	const ttl = 3 * time.Second
	a := newLocker(t, eps, prefix, dlock.WithTTL(ttl))
	b := newLocker(t, eps, prefix, dlock.WithTTL(ttl))
	lease := locktest.Must(t)(a.Acquire(ctx, "job"))
	if !lease.Expires().IsZero() {
		t.Errorf("Expires() = %v, want the zero time: the session, not the watchdog, keeps etcd locks", lease.Expires())
	}
	id := clientv3.LeaseID(holderKey(t, admin, prefix, "job").Lease)
	if want := etcdlock.SessionLease(drv(a), ttl); id != want {
		t.Errorf("the lock's key is on lease %x, want the session's %x", id, want)
	}
	if _, err := admin.Revoke(ctx, id); err != nil {
		t.Fatal(err)
	}
	revoked := time.Now()
	other, err := b.TryAcquire(ctx, "job")
	if err != nil {
		t.Fatalf("TryAcquire after the holder's lease was revoked: %v", err)
	}
	defer other.Release(ctx)
	select {
	case <-lease.Done():
		t.Logf("the holder learned of the revocation after %v", time.Since(revoked))
	case <-time.After(10 * time.Second): // a hang bound: 10× the keep-alive period TTL/3
		t.Fatal("the holder's Done() not closed 10s after its lease was revoked")
	}
	if !errors.Is(lease.Err(), dlock.ErrLost) {
		t.Errorf("Err() = %v, want ErrLost", lease.Err())
	}
	if other.Token() <= lease.Token() {
		t.Errorf("token %d after the revocation is not greater than %d", other.Token(), lease.Token())
	}
	// The next acquisition by the same client gets a new session.
	again, err := a.Acquire(ctx, "other")
	if err != nil {
		t.Fatalf("Acquire after the session was lost: %v", err)
	}
	if id2 := etcdlock.SessionLease(drv(a), ttl); id2 == id || id2 == 0 {
		t.Errorf("session lease after the loss = %x, want a new one (old %x)", id2, id)
	}
	_ = again.Release(ctx)
}

// countingClient returns a client whose unary calls are counted by method.
func countingClient(t *testing.T, eps []string) (*clientv3.Client, func() map[string]int) {
	var mu sync.Mutex
	calls := map[string]int{}
	count := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		mu.Lock()
		calls[method[strings.LastIndex(method, "/")+1:]]++
		mu.Unlock()
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	c, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(count)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, func() map[string]int {
		mu.Lock()
		defer mu.Unlock()
		m := calls
		calls = map[string]int{}
		return m
	}
}

// TestOneTransaction: with the session in place, an uncontended acquire is
// one transaction and a release one delete; TryAcquire of a held lock is
// one transaction that writes nothing.
func TestOneTransaction(t *testing.T) {
	eps, admin, prefix, ctx := fixture(t, 20*time.Second)
	c, calls := countingClient(t, eps)
	l, err := etcdlock.New(c, &etcdlock.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()

	first := locktest.Must(t)(l.Acquire(ctx, "warm-up"))
	_ = first.Release(ctx)
	if got := calls(); got["LeaseGrant"] != 1 {
		t.Errorf("first acquisition: calls %v, want one LeaseGrant for the session", got)
	}
	for i := range 5 {
		lease := locktest.Must(t)(l.Acquire(ctx, "job"))
		if got := calls(); len(got) != 1 || got["Txn"] != 1 {
			t.Errorf("acquire %d: calls %v, want one Txn", i, got)
		}
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if got := calls(); len(got) != 1 || got["DeleteRange"] != 1 {
			t.Errorf("release %d: calls %v, want one DeleteRange", i, got)
		}
	}

	holder := newLocker(t, eps, prefix)
	held := locktest.Must(t)(holder.Acquire(ctx, "job"))
	defer held.Release(ctx)
	calls()
	if _, err := l.TryAcquire(ctx, "job"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryAcquire of a held lock = %v, want ErrNotAcquired", err)
	}
	if got := calls(); len(got) != 1 || got["Txn"] != 1 {
		t.Errorf("TryAcquire of a held lock: calls %v, want one Txn", got)
	}
	if n := countKeys(t, admin, prefix, "job"); n != 1 {
		t.Errorf("%d keys under the held lock after a failed TryAcquire, want 1", n)
	}
}

// TestTTLRoundsUp: a lock's TTL becomes a lease of whole seconds; locks
// with the same TTL share one session, another TTL gets its own.
func TestTTLRoundsUp(t *testing.T) {
	eps := testenv.EtcdEndpoints(t)
	admin := testenv.EtcdClient(t, eps)
	ctx := locktest.Context(t, 20*time.Second)
	l := newLocker(t, eps, randomPrefix())
	for _, c := range []struct {
		ttl  time.Duration
		want int64
	}{{1500 * time.Millisecond, 2}, {2 * time.Second, 2}, {30 * time.Second, 30}, {10 * time.Millisecond, 1}} {
		lease := locktest.Must(t)(l.Acquire(ctx, "ttl", dlock.WithTTL(c.ttl)))
		id := etcdlock.SessionLease(drv(l), c.ttl)
		resp, err := admin.TimeToLive(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if resp.GrantedTTL != c.want {
			t.Errorf("TTL %v: lease of %ds, want %ds", c.ttl, resp.GrantedTTL, c.want)
		}
		_ = lease.Release(ctx)
	}
	if a, b := etcdlock.SessionLease(drv(l), 1500*time.Millisecond), etcdlock.SessionLease(drv(l), 2*time.Second); a != b {
		t.Errorf("TTLs 1.5s and 2s use leases %x and %x, want one session", a, b)
	}
}

// TestKeysAreReused: a name taken again and again through one driver
// writes the same key (so the index under the name does not grow with
// every acquisition); acquisitions of one name that overlap get keys of
// their own, and a slot is reused once free.
func TestKeysAreReused(t *testing.T) {
	eps, admin, prefix, ctx := fixture(t, 20*time.Second)
	l := newLocker(t, eps, prefix)
	var first string
	for i := range 5 {
		lease := locktest.Must(t)(l.Acquire(ctx, "again"))
		key := string(holderKey(t, admin, prefix, "again").Key)
		if i == 0 {
			first = key
		} else if key != first {
			t.Errorf("acquisition %d wrote %q, want the same key as the first, %q", i, key, first)
		}
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	held := locktest.Must(t)(l.Acquire(ctx, "again"))
	waiter := make(chan *dlock.Lease, 1)
	go func() {
		lease, err := l.Acquire(ctx, "again")
		if err != nil {
			t.Error(err)
		}
		waiter <- lease
	}()
	waitKeys(t, admin, prefix, "again", 2)
	resp, err := admin.Get(ctx, prefix+"/again/#", clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		t.Fatal(err)
	}
	if string(resp.Kvs[0].Key) != first || string(resp.Kvs[1].Key) != first+".1" {
		t.Errorf("keys of two overlapping acquisitions: %q, %q; want %q, %q", resp.Kvs[0].Key, resp.Kvs[1].Key, first, first+".1")
	}
	if string(resp.Kvs[0].Value) != held.Owner() {
		t.Errorf("the holder's key holds %q, want its owner %q", resp.Kvs[0].Value, held.Owner())
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	second := <-waiter
	if err := second.Release(ctx); err != nil {
		t.Fatal(err)
	}
	again := locktest.Must(t)(l.Acquire(ctx, "again"))
	if key := string(holderKey(t, admin, prefix, "again").Key); key != first {
		t.Errorf("after both released, the next acquisition wrote %q, want the freed first slot %q", key, first)
	}
	_ = again.Release(ctx)
}
