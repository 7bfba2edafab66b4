package etcdlock_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/etcdlock"
	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/locktest"
)

// concLocker returns a Locker in LayoutConcurrency on a client of its
// own, as another process would have; both are closed when t ends.
func concLocker(t testing.TB, eps []string, prefix string, opts ...dlock.Option) *dlock.Locker {
	t.Helper()
	l, err := etcdlock.New(testenv.EtcdClient(t, eps), &etcdlock.Options{Prefix: prefix, Layout: etcdlock.LayoutConcurrency}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// concQueue returns the keys that hold or await the lock (or election)
// whose concurrency-package prefix is pfx, oldest first.
func concQueue(t testing.TB, admin *clientv3.Client, pfx string) []string {
	t.Helper()
	var keys []string
	for _, kv := range queue(t, admin, pfx+"/") {
		keys = append(keys, string(kv.Key))
	}
	return keys
}

// TestLayoutConformance runs the conformance suite in LayoutConcurrency:
// the mutex, the multi-lock and the election pass it; readers-writer
// locks and semaphores are reported unsupported.
func TestLayoutConformance(t *testing.T) {
	eps := testenv.EtcdEndpoints(t)
	admin := testenv.EtcdClient(t, eps)
	prefix := randomPrefix()
	locktestRun(t, eps, prefix, etcdlock.LayoutConcurrency, func(t *testing.T, name string) {
		kvs := queue(t, admin, prefix+"/"+name+"/")
		if len(kvs) == 0 {
			t.Fatalf("no key holds %q", name)
		}
		if _, err := admin.Delete(context.Background(), string(kvs[0].Key)); err != nil {
			t.Fatalf("delete %q: %v", kvs[0].Key, err)
		}
	})
}

// TestLayoutKeys: in LayoutConcurrency a lock's key is exactly the one
// concurrency.NewMutex(s, pfx) writes for its lease, pfx + "/" + the
// lease in hex, with an empty value and the lock's token as its create
// revision, for each way a URL's path gives the prefix; a bad layout is a
// *dlock.ParamError naming the parameter.
func TestLayoutKeys(t *testing.T) {
	eps := testenv.EtcdEndpoints(t)
	admin := testenv.EtcdClient(t, eps)
	ctx, r := t.Context(), randomPrefix()
	for _, c := range []struct {
		path, prefix, pfx string // pfx: NewMutex's for the lock named r+"/job"
	}{
		{"", "", r + "/job"},
		{"/", "", r + "/job"},
		{"//", "/", "/" + r + "/job"},
		{"/app", "app", "app/" + r + "/job"},
		{"/app/", "app/", "app/" + r + "/job"},
		{"//app", "/app", "/app/" + r + "/job"},
	} {
		l, err := dlock.Open(ctx, "etcd://"+eps[0]+c.path+"?layout=concurrency")
		if err != nil {
			t.Fatal(err)
		}
		d := drv(l)
		if d.Prefix() != c.prefix || d.Layout() != etcdlock.LayoutConcurrency {
			t.Errorf("path %q: Prefix, Layout = %q, %q; want %q, concurrency", c.path, d.Prefix(), d.Layout(), c.prefix)
		}
		lease := locktest.Must(t)(l.Acquire(ctx, r+"/job"))
		kvs := queue(t, admin, c.pfx+"/")
		lid := etcdlock.SessionLease(d, lease.TTL())
		want := c.pfx + "/" + strconv.FormatInt(int64(lid), 16)
		if len(kvs) != 1 || string(kvs[0].Key) != want || len(kvs[0].Value) != 0 || kvs[0].Lease != int64(lid) ||
			uint64(kvs[0].CreateRevision) != lease.Token() {
			t.Errorf("path %q: keys %v, want only %q = \"\" on lease %x with create revision %d", c.path, kvs, want, lid, lease.Token())
		}
		// The key is the one concurrency.Mutex would write on that lease.
		s, err := concurrency.NewSession(testenv.EtcdClient(t, eps), concurrency.WithLease(lid))
		if err != nil {
			t.Fatal(err)
		}
		if m := concurrency.NewMutex(s, c.pfx); m.TryLock(ctx) != nil || m.Key() != want {
			t.Errorf("path %q: concurrency.Mutex on the holder's own lease took key %q, want to find its key %q", c.path, m.Key(), want)
		}
		s.Orphan()
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
		_ = l.Close()
	}

	for _, bad := range []string{"Concurrency", "", "zk"} {
		u := "etcd://" + eps[0] + "/x?layout=" + bad
		l, err := dlock.Open(ctx, u)
		if pe, ok := errors.AsType[*dlock.ParamError](err); !ok || pe.Param != "layout" {
			t.Errorf("Open(%q) = %v, want a *ParamError naming layout", u, err)
		}
		if l != nil {
			_ = l.Close()
		}
	}
	l, err := dlock.Open(ctx, "etcd://"+eps[0]+"/x?layout=dlock")
	if err != nil {
		t.Fatal(err)
	}
	if d := drv(l); d.Layout() != etcdlock.LayoutDlock || d.Prefix() != "x" {
		t.Errorf("layout=dlock: Layout, Prefix = %q, %q; want dlock, x", d.Layout(), d.Prefix())
	}
	_ = l.Close()
	func() {
		defer func() {
			if recover() == nil {
				t.Error("NewDriver with an unknown layout did not panic")
			}
		}()
		etcdlock.NewDriver(admin, &etcdlock.Options{Layout: "zk"})
	}()
}

// TestLayoutUnsupportedKinds: in LayoutConcurrency the driver has no
// readers-writer lock or semaphore; the Locker says so before asking it,
// and the driver itself, asked directly, names the layout.
func TestLayoutUnsupportedKinds(t *testing.T) {
	eps := testenv.EtcdEndpoints(t)
	ctx := t.Context()
	l := concLocker(t, eps, randomPrefix())
	for _, m := range []driver.Mode{driver.Read, driver.Write, driver.Permit} {
		if l.Supports(m) {
			t.Errorf("Supports(%v) = true in layout concurrency", m)
		}
		_, err := drv(l).TryLock(ctx, driver.Request{Name: "x", Owner: "o", TTL: time.Second, Mode: m, Limit: 2})
		if !errors.Is(err, dlock.ErrUnsupported) || !strings.Contains(err.Error(), "layout concurrency") {
			t.Errorf("driver TryLock in mode %v = %v, want ErrUnsupported naming the layout", m, err)
		}
	}
	if !l.Supports(driver.Exclusive) || !l.Supports(driver.Leader) {
		t.Error("the mutex or the election is unsupported in layout concurrency")
	}
	if _, err := l.AcquireRead(ctx, "x"); !errors.Is(err, dlock.ErrUnsupported) {
		t.Errorf("AcquireRead = %v, want ErrUnsupported", err)
	}
	if _, err := l.TryAcquirePermit(ctx, "x", 2); !errors.Is(err, dlock.ErrUnsupported) {
		t.Errorf("TryAcquirePermit = %v, want ErrUnsupported", err)
	}
}

// TestLayoutInspect: in LayoutConcurrency, Inspect lists the holders of
// the driver's own locks and of concurrency.Mutex's alike, with tokens,
// owners and waiters, and leaves out keys that are no lock's.
func TestLayoutInspect(t *testing.T) {
	eps := testenv.EtcdEndpoints(t)
	admin := testenv.EtcdClient(t, eps)
	ctx := t.Context()
	prefix := randomPrefix()
	l := concLocker(t, eps, prefix)
	other := drv(concLocker(t, eps, prefix))
	a := locktest.Must(t)(l.Acquire(ctx, "jobs/a"))
	s := newSession(t, eps)
	m := concurrency.NewMutex(s, prefix+"/jobs/b")
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	waiting := start(func() (*dlock.Lease, error) { return l.Acquire(wctx, "jobs/b") })
	waitQueue(t, admin, prefix+"/jobs/b/", 2)
	// Not lock keys: no lease, or a last segment that is not the lease.
	for _, k := range []string{prefix + "/jobs/c/1234", prefix + "/jobs/d/config"} {
		if _, err := admin.Put(ctx, k, "x"); err != nil {
			t.Fatal(err)
		}
	}
	g, err := admin.Grant(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Put(ctx, prefix+"/jobs/e/feed", "", clientv3.WithLease(g.ID)); err != nil {
		t.Fatal(err)
	}

	got, err := other.Inspect(ctx, "jobs/")
	if err != nil {
		t.Fatal(err)
	}
	rev := func(key string) uint64 {
		resp, err := admin.Get(ctx, key)
		if err != nil || len(resp.Kvs) == 0 {
			t.Fatalf("get %q: %v", key, err)
		}
		return uint64(resp.Kvs[0].CreateRevision)
	}
	want := []driver.LockInfo{
		{Name: "jobs/a", Mode: driver.Exclusive, Token: a.Token(), Owner: "lease " + strconv.FormatInt(int64(etcdlock.SessionLease(drv(l), a.TTL())), 16)},
		{Name: "jobs/b", Mode: driver.Exclusive, Token: rev(m.Key()), Owner: "lease " + strconv.FormatInt(int64(s.Lease()), 16), Waiters: 1},
	}
	if len(got) != len(want) {
		t.Fatalf("Inspect = %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i].Expires.IsZero() {
			t.Errorf("%s: no expiry", got[i].Name)
		}
		got[i].Expires = time.Time{}
		if got[i] != want[i] {
			t.Errorf("Inspect entry %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	if mine, err := drv(l).Inspect(ctx, "jobs/a"); err != nil || len(mine) != 1 || mine[0].Owner != a.Owner() {
		t.Errorf("the holder's own Inspect = %+v, %v; want its owner %q", mine, err, a.Owner())
	}
	cancel()
	select {
	case <-waiting.err:
	case lease := <-waiting.lease:
		t.Errorf("the cancelled waiter acquired (token %d)", lease.Token())
	case <-time.After(10 * time.Second):
		t.Error("the cancelled waiter did not return")
	}
}

// TestLayoutsDoNotExclude: the two layouts are no protection for each
// other, even on one prefix. There a LayoutDlock key of "x",
// <prefix>/x/#<lease>, lies under LayoutConcurrency's queue <prefix>/x/,
// so the concurrency side waits for it, as concurrency.Mutex would; but
// the LayoutDlock side reads only <prefix>/x/#, and takes "x" while the
// concurrency side holds it.
func TestLayoutsDoNotExclude(t *testing.T) {
	eps := testenv.EtcdEndpoints(t)
	ctx := t.Context()
	prefix := randomPrefix()
	native, conc := newLocker(t, eps, prefix), concLocker(t, eps, prefix)
	held := locktest.Must(t)(native.Acquire(ctx, "x"))
	if _, err := conc.TryAcquire(ctx, "x"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("layout concurrency TryAcquire while layout dlock holds on the same prefix = %v, want ErrNotAcquired", err)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	held = locktest.Must(t)(conc.Acquire(ctx, "x"))
	both, err := native.TryAcquire(ctx, "x")
	if err != nil {
		t.Fatalf("layout dlock TryAcquire while layout concurrency holds = %v; want it to succeed: it does not read that layout's keys", err)
	}
	_ = both.Release(ctx)
	_ = held.Release(ctx)
}
