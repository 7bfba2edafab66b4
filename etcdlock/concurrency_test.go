package etcdlock_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/locktest"
)

// These tests run dlock in LayoutConcurrency beside etcd's own
// concurrency.Mutex and concurrency.Election, each side on sessions and
// clients of its own, and beside etcdctl lock and etcdctl elect (Debian's
// etcd-client), processes of their own, on the same names. A missing
// etcdctl fails the latter (testenv.EtcdctlBinary).

// interop returns what each of these tests starts with: the endpoints of
// an etcd, a client of it, a fresh prefix, and a context that ends after
// limit or with the test.
func interop(t *testing.T, limit time.Duration) ([]string, *clientv3.Client, string, context.Context) {
	t.Helper()
	eps := testenv.EtcdEndpoints(t)
	ctx, cancel := context.WithTimeout(t.Context(), limit)
	t.Cleanup(cancel)
	return eps, testenv.EtcdClient(t, eps), randomPrefix(), ctx
}

// concSession returns a concurrency session with a lease of ttl seconds
// on a client of its own, closed when t ends.
func concSession(t testing.TB, eps []string, ttl int) *concurrency.Session {
	t.Helper()
	s, err := concurrency.NewSession(testenv.EtcdClient(t, eps), concurrency.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// createRev returns key's create revision; 0 when it does not exist.
func createRev(t testing.TB, admin *clientv3.Client, key string) int64 {
	t.Helper()
	resp, err := admin.Get(context.Background(), key)
	if err != nil {
		t.Fatalf("get %q: %v", key, err)
	}
	if len(resp.Kvs) == 0 {
		return 0
	}
	return resp.Kvs[0].CreateRevision
}

// concLock runs m.Lock(ctx) in the background; the channel gets its error.
func concLock(ctx context.Context, m *concurrency.Mutex) <-chan error {
	done := make(chan error, 1)
	go func() { done <- m.Lock(ctx) }()
	return done
}

// await waits up to d for done's error, failing t if none comes.
func await(t testing.TB, done <-chan error, d time.Duration, what string) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		t.Fatalf("%s: no result within %v", what, d)
	}
	return nil
}

// stillWaiting fails t if done has a result within 300ms.
func stillWaiting(t testing.TB, done <-chan error, what string) {
	t.Helper()
	select {
	case err := <-done:
		t.Fatalf("%s returned (%v) while it should wait", what, err)
	case <-time.After(300 * time.Millisecond):
	}
}

// TestConcurrencyMutexContention: dlock Lockers (two goroutines on each,
// so that one driver holds and awaits the name at once) and
// concurrency.Mutex sessions take one name over and over. At no time do
// two hold it, and the holders' create revisions, dlock's tokens, grow in
// the order they entered.
func TestConcurrencyMutexContention(t *testing.T) {
	eps, admin, prefix, ctx := interop(t, 120*time.Second)
	const name, rounds = "hot", 12
	pfx := prefix + "/" + name
	var (
		holders   atomic.Int32
		mu        sync.Mutex
		revs      []int64
		entries   = map[string]int{}
		overlaps  atomic.Int32
		wg        sync.WaitGroup
		firstFail sync.Once
	)
	fail := func(format string, args ...any) {
		firstFail.Do(func() { t.Errorf(format, args...) })
	}
	// hold is the critical section: the gauge, and the holder's revision.
	hold := func(side string, rev int64) {
		if n := holders.Add(1); n > 1 {
			overlaps.Add(1)
		}
		mu.Lock()
		revs = append(revs, rev)
		entries[side]++
		mu.Unlock()
		time.Sleep(2 * time.Millisecond)
		holders.Add(-1)
	}
	for i := range 2 {
		l := concLocker(t, eps, prefix)
		for range 2 {
			wg.Go(func() {
				for range rounds {
					lease, err := l.Acquire(ctx, name)
					if err != nil {
						fail("dlock %d: %v", i, err)
						return
					}
					hold("dlock", int64(lease.Token()))
					if err := lease.Release(ctx); err != nil {
						fail("dlock %d: release: %v", i, err)
						return
					}
				}
			})
		}
	}
	for i := range 3 {
		s := concSession(t, eps, 10)
		wg.Go(func() {
			for range rounds {
				m := concurrency.NewMutex(s, pfx)
				if err := m.Lock(ctx); err != nil {
					fail("concurrency %d: %v", i, err)
					return
				}
				hold("concurrency", createRev(t, admin, m.Key()))
				if err := m.Unlock(ctx); err != nil {
					fail("concurrency %d: unlock: %v", i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if n := overlaps.Load(); n > 0 {
		t.Errorf("two holders at once %d times", n)
	}
	if entries["dlock"] != 4*rounds || entries["concurrency"] != 3*rounds {
		t.Errorf("entries %v, want %d by dlock and %d by concurrency.Mutex", entries, 4*rounds, 3*rounds)
	}
	for i := 1; i < len(revs); i++ {
		if revs[i] <= revs[i-1] {
			t.Errorf("holder %d's create revision %d is not above the previous holder's %d", i, revs[i], revs[i-1])
			break
		}
	}
	if keys := concQueue(t, admin, pfx); len(keys) != 0 {
		t.Errorf("keys left after every release: %q", keys)
	}
}

// TestConcurrencyMutexFIFO: behind a concurrency.Mutex holder, dlock A,
// concurrency.Mutex B and dlock C (a second acquisition by A's driver,
// key <lease>.1) queue in that order and enter in that order.
func TestConcurrencyMutexFIFO(t *testing.T) {
	eps, admin, prefix, ctx := interop(t, 60*time.Second)
	const name = "fifo"
	pfx := prefix + "/" + name
	h := concurrency.NewMutex(concSession(t, eps, 10), pfx)
	if err := h.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	l := concLocker(t, eps, prefix)
	var mu sync.Mutex
	var order []string
	enter := func(who string) {
		mu.Lock()
		order = append(order, who)
		mu.Unlock()
	}
	dlockSide := func(who string) <-chan error {
		done := make(chan error, 1)
		go func() {
			lease, err := l.Acquire(ctx, name)
			if err == nil {
				enter(who)
				err = lease.Release(ctx)
			}
			done <- err
		}()
		return done
	}
	a := dlockSide("A")
	waitQueue(t, admin, pfx+"/", 2)
	b := make(chan error, 1)
	go func() {
		m := concurrency.NewMutex(concSession(t, eps, 10), pfx)
		err := m.Lock(ctx)
		if err == nil {
			enter("B")
			err = m.Unlock(ctx)
		}
		b <- err
	}()
	waitQueue(t, admin, pfx+"/", 3)
	c := dlockSide("C")
	kvs := waitQueue(t, admin, pfx+"/", 4)
	if string(kvs[3].Key) != string(kvs[1].Key)+".1" {
		t.Errorf("C's key %q, want A's %q with .1", kvs[3].Key, kvs[1].Key)
	}
	stillWaiting(t, a, "A behind the holder")
	if err := h.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	for _, p := range []struct {
		who  string
		done <-chan error
	}{{"A", a}, {"B", b}, {"C", c}} {
		if err := await(t, p.done, 20*time.Second, p.who); err != nil {
			t.Fatalf("%s: %v", p.who, err)
		}
	}
	if got := fmt.Sprint(order); got != "[A B C]" {
		t.Errorf("entry order %s, want [A B C]", got)
	}
}

// TestConcurrencyMutexCrashedHolder: a holder whose session dies without
// releasing (its client closed, or its keep-alives stopped) frees the
// lock for a waiter of the other side once its lease expires, and not
// before.
func TestConcurrencyMutexCrashedHolder(t *testing.T) {
	eps, admin, prefix, ctx := interop(t, 60*time.Second)
	const ttl = 2 * time.Second

	t.Run("dlock holder", func(t *testing.T) {
		pfx := prefix + "/a"
		holder := concLocker(t, eps, prefix, dlock.WithTTL(ttl))
		lease := locktest.Must(t)(holder.Acquire(ctx, "a"))
		key := holderKeyOf(t, admin, pfx, lease)
		m := concurrency.NewMutex(concSession(t, eps, 10), pfx)
		done := concLock(ctx, m)
		waitQueue(t, admin, pfx+"/", 2)
		stillWaiting(t, done, "concurrency.Mutex behind a live dlock holder")
		_ = drv(holder).Client().Close()
		crashed := time.Now()
		if err := await(t, done, 30*time.Second, "concurrency.Mutex after the dlock holder crashed"); err != nil {
			t.Fatal(err)
		}
		t.Logf("concurrency.Mutex acquired %v after the dlock holder's client closed", time.Since(crashed))
		if createRev(t, admin, key) != 0 {
			t.Errorf("concurrency.Mutex acquired while the crashed holder's key %q still exists", key)
		}
		_ = m.Unlock(ctx)
	})

	t.Run("concurrency holder", func(t *testing.T) {
		pfx := prefix + "/b"
		s := concSession(t, eps, int(ttl/time.Second))
		m := concurrency.NewMutex(s, pfx)
		if err := m.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		w := concLocker(t, eps, prefix)
		p := start(func() (*dlock.Lease, error) { return w.Acquire(ctx, "b") })
		waitQueue(t, admin, pfx+"/", 2)
		p.notYet(t, "dlock behind a live concurrency.Mutex holder")
		s.Orphan() // keep-alives stop; the lease expires on the server
		crashed := time.Now()
		lease := p.get(t, "dlock after the concurrency.Mutex holder's session died")
		t.Logf("dlock acquired %v after the concurrency.Mutex holder's keep-alives stopped", time.Since(crashed))
		if createRev(t, admin, m.Key()) != 0 {
			t.Error("dlock acquired while the crashed holder's key still exists")
		}
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// holderKeyOf returns the dlock holder's key: the one under pfx whose
// create revision is the lease's token.
func holderKeyOf(t testing.TB, admin *clientv3.Client, pfx string, lease *dlock.Lease) string {
	t.Helper()
	for _, kv := range queue(t, admin, pfx+"/") {
		if uint64(kv.CreateRevision) == lease.Token() {
			return string(kv.Key)
		}
	}
	t.Fatalf("no key under %q has the holder's token %d", pfx, lease.Token())
	return ""
}

// TestConcurrencyMutexOwnKeysOnly: each side removes only its own keys:
// a failed concurrency TryLock or a cancelled concurrency Lock leaves the
// dlock holder's key, a failed or cancelled dlock acquisition leaves the
// concurrency holder's and waiter's. A dlock driver's second acquisition
// of the name (key <lease>.1) counts as a holder for concurrency.Mutex.
func TestConcurrencyMutexOwnKeysOnly(t *testing.T) {
	eps, admin, prefix, ctx := interop(t, 60*time.Second)
	const name = "own"
	pfx := prefix + "/" + name
	l := concLocker(t, eps, prefix)
	first := locktest.Must(t)(l.Acquire(ctx, name))
	held := concQueue(t, admin, pfx)
	try := concurrency.NewMutex(concSession(t, eps, 10), pfx)
	if err := try.TryLock(ctx); !errors.Is(err, concurrency.ErrLocked) {
		t.Fatalf("concurrency TryLock while dlock holds = %v, want ErrLocked", err)
	}
	cctx, ccancel := context.WithTimeout(ctx, 300*time.Millisecond)
	err := concurrency.NewMutex(concSession(t, eps, 10), pfx).Lock(cctx)
	ccancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("concurrency Lock with a short deadline while dlock holds = %v, want its deadline", err)
	}
	if got := concQueue(t, admin, pfx); fmt.Sprint(got) != fmt.Sprint(held) {
		t.Fatalf("keys after concurrency's failed attempts %q, want only the dlock holder's %q", got, held)
	}

	// A second dlock acquisition queues as <lease>.1, a concurrency Mutex
	// behind it. Once the first releases, the .1 key holds alone, and
	// concurrency.Mutex sees it as the holder.
	second := start(func() (*dlock.Lease, error) { return l.Acquire(ctx, name) })
	waitQueue(t, admin, pfx+"/", 2)
	waiter := concurrency.NewMutex(concSession(t, eps, 10), pfx)
	wdone := concLock(ctx, waiter)
	waitQueue(t, admin, pfx+"/", 3)
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lease2 := second.get(t, "the second dlock acquisition")
	stillWaiting(t, wdone, "concurrency.Mutex behind the second dlock acquisition")
	if err := concurrency.NewMutex(concSession(t, eps, 10), pfx).TryLock(ctx); !errors.Is(err, concurrency.ErrLocked) {
		t.Errorf("concurrency TryLock while dlock's .1 key holds = %v, want ErrLocked", err)
	}
	if err := lease2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := await(t, wdone, 20*time.Second, "concurrency.Mutex after both dlock releases"); err != nil {
		t.Fatal(err)
	}

	// Now concurrency holds: dlock's failed attempts leave its key.
	if _, err := l.TryAcquire(ctx, name); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("dlock TryAcquire while concurrency.Mutex holds = %v, want ErrNotAcquired", err)
	}
	cctx, ccancel = context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = l.Acquire(cctx, name)
	ccancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("dlock Acquire with a short deadline while concurrency.Mutex holds = %v, want its deadline", err)
	}
	if got := concQueue(t, admin, pfx); len(got) != 1 || got[0] != waiter.Key() {
		t.Fatalf("keys after dlock's failed attempts %q, want only the concurrency holder's %q", got, waiter.Key())
	}
	if err := waiter.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if got := concQueue(t, admin, pfx); len(got) != 0 {
		t.Errorf("keys left: %q", got)
	}
}

// receiveUntil receives from ch until a value satisfies ok, and returns
// it; it fails t when ch closes first or after 30s (a hang bound, over
// 10× a crashed leader's TTL of 2s).
func receiveUntil[T any](t testing.TB, ch <-chan T, what string, ok func(T) bool) T {
	t.Helper()
	timeout := time.After(30 * time.Second)
	var seen []T
	for {
		select {
		case v, open := <-ch:
			if !open {
				t.Fatalf("%s: the channel closed first; seen %v", what, seen)
			}
			if ok(v) {
				return v
			}
			seen = append(seen, v)
		case <-timeout:
			t.Fatalf("%s: not within 30s; seen %v", what, seen)
		}
	}
}

// concObserved receives from a concurrency.Election's Observe channel
// until it reports value; it returns the leader key's create revision.
func concObserved(t *testing.T, ch <-chan clientv3.GetResponse, value string) int64 {
	t.Helper()
	resp := receiveUntil(t, ch, "concurrency Observe reports "+value, func(r clientv3.GetResponse) bool {
		return string(r.Kvs[0].Value) == value
	})
	return resp.Kvs[0].CreateRevision
}

// dlockObserved receives from a dlock Observe channel until it reports
// want.
func dlockObserved(t *testing.T, ch <-chan dlock.LeaderInfo, want dlock.LeaderInfo) {
	t.Helper()
	receiveUntil(t, ch, fmt.Sprintf("dlock Observe reports %+v", want), func(i dlock.LeaderInfo) bool { return i == want })
}

// observeNobody returns a Locker in LayoutConcurrency that observes the
// election name, and its channel, once it has reported that nobody leads.
func observeNobody(t *testing.T, ctx context.Context, eps []string, prefix, name string) (*dlock.Locker, <-chan dlock.LeaderInfo) {
	t.Helper()
	obs := concLocker(t, eps, prefix)
	ch, err := obs.Observe(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	dlockObserved(t, ch, dlock.LeaderInfo{})
	return obs, ch
}

// TestConcurrencyElection: dlock candidates and concurrency.Election
// candidates on one election agree on a single leader at each step, and
// each side's Leader and Observe report the other's leader with its
// value and create revision: dlock a leads; concurrency b, then dlock c,
// campaign behind it; a resigns and b leads; b resigns and c leads; c's
// process dies and concurrency d, queued behind it, leads; d's session
// dies and nobody leads.
func TestConcurrencyElection(t *testing.T) {
	eps, admin, prefix, ctx := interop(t, 90*time.Second)
	const name, ttl = "svc", 2 * time.Second
	pfx := prefix + "/" + name
	obs, dch := observeNobody(t, ctx, eps, prefix, name)
	watcher := concurrency.NewElection(concSession(t, eps, 10), pfx)
	cch := watcher.Observe(ctx)
	agree := func(value string, token uint64) {
		t.Helper()
		want := dlock.LeaderInfo{Value: value, Token: token}
		dlockObserved(t, dch, want)
		if got := concObserved(t, cch, value); uint64(got) != token {
			t.Errorf("concurrency Observe: %q's create revision %d, want %d", value, got, token)
		}
		if got, err := obs.Leader(ctx, name); err != nil || got != want {
			t.Errorf("dlock Leader = %+v, %v; want %+v", got, err, want)
		}
		resp, err := watcher.Leader(ctx)
		if err != nil || string(resp.Kvs[0].Value) != value || uint64(resp.Kvs[0].CreateRevision) != token {
			t.Errorf("concurrency Leader = %v, %v; want %q with create revision %d", resp, err, value, token)
		}
	}

	a := concLocker(t, eps, prefix)
	la := locktest.Must(t)(a.Campaign(ctx, name, "dlock-a"))
	agree("dlock-a", la.Token())

	b := concurrency.NewElection(concSession(t, eps, 10), pfx)
	bdone := make(chan error, 1)
	go func() { bdone <- b.Campaign(ctx, "conc-b") }()
	waitQueue(t, admin, pfx+"/", 2)
	c := concLocker(t, eps, prefix, dlock.WithTTL(ttl))
	pc := start(func() (*dlock.Lease, error) { return c.Campaign(ctx, name, "dlock-c") })
	waitQueue(t, admin, pfx+"/", 3)
	stillWaiting(t, bdone, "concurrency candidate b behind dlock leader a")
	pc.notYet(t, "dlock candidate c")

	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := await(t, bdone, 10*time.Second, "concurrency candidate b after a resigned"); err != nil {
		t.Fatal(err)
	}
	agree("conc-b", uint64(b.Rev()))
	pc.notYet(t, "dlock candidate c behind concurrency leader b")

	ds := concSession(t, eps, int(ttl/time.Second))
	d := concurrency.NewElection(ds, pfx)
	ddone := make(chan error, 1)
	go func() { ddone <- d.Campaign(ctx, "conc-d") }()
	waitQueue(t, admin, pfx+"/", 3)
	if err := b.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	lc := pc.get(t, "dlock candidate c after b resigned")
	agree("dlock-c", lc.Token())
	stillWaiting(t, ddone, "concurrency candidate d behind dlock leader c")

	_ = drv(c).Client().Close() // c's process dies; its lease expires
	if err := await(t, ddone, 30*time.Second, "concurrency candidate d after c crashed"); err != nil {
		t.Fatal(err)
	}
	agree("conc-d", uint64(d.Rev()))

	// d's keep-alives stop: once its lease expires, nobody leads.
	ds.Orphan()
	dlockObserved(t, dch, dlock.LeaderInfo{})
	if got, err := obs.Leader(ctx, name); err != nil || got != (dlock.LeaderInfo{}) {
		t.Errorf("dlock Leader after every candidate left = %+v, %v; want nobody", got, err)
	}
	if _, err := watcher.Leader(ctx); !errors.Is(err, concurrency.ErrElectionNoLeader) {
		t.Errorf("concurrency Leader after every candidate left = %v, want ErrElectionNoLeader", err)
	}
}

// waitFile waits up to d for path to exist and returns its content.
func waitFile(t testing.TB, path string, d time.Duration) string {
	t.Helper()
	for deadline := time.Now().Add(d); ; time.Sleep(10 * time.Millisecond) {
		if b, err := os.ReadFile(path); err == nil {
			return string(b)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not appear within %v", path, d)
		}
	}
}

// exited runs cmd.Wait in the background; the channel gets its error.
func exited(cmd *exec.Cmd) <-chan error {
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	return done
}

// lockRev is the create revision etcdctl lock hands its command as
// ETCD_LOCK_REV, as the command wrote it to a file.
func lockRev(t testing.TB, content string) uint64 {
	t.Helper()
	rev, err := strconv.ParseUint(strings.TrimSpace(content), 10, 64)
	if err != nil {
		t.Fatalf("ETCD_LOCK_REV = %q: %v", content, err)
	}
	return rev
}

// TestEtcdctlLock: while `etcdctl lock NAME -- cmd` runs cmd, dlock cannot
// take NAME, and a waiting Acquire gets it once cmd ends; while dlock
// holds NAME, etcdctl lock waits and runs its command only after the
// release. Tokens and ETCD_LOCK_REV grow across the handoffs.
func TestEtcdctlLock(t *testing.T) {
	eps, admin, prefix, ctx := interop(t, 60*time.Second)
	dir := t.TempDir()
	name := "job"
	l := concLocker(t, eps, prefix)

	in, out := filepath.Join(dir, "in"), filepath.Join(dir, "out")
	ctl := testenv.Etcdctl(t, eps, "lock", prefix+"/"+name, "--", "sh", "-c",
		`echo "$ETCD_LOCK_REV" > "$1.tmp" && mv "$1.tmp" "$1"; while [ ! -e "$2" ]; do sleep 0.02; done`, "sh", in, out)
	if err := ctl.Start(); err != nil {
		t.Fatal(err)
	}
	ctlDone := exited(ctl)
	ctlRev := lockRev(t, waitFile(t, in, 15*time.Second))
	if _, err := l.TryAcquire(ctx, name); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("dlock TryAcquire while etcdctl lock runs its command = %v, want ErrNotAcquired", err)
	}
	p := start(func() (*dlock.Lease, error) { return l.Acquire(ctx, name) })
	p.notYet(t, "dlock Acquire while etcdctl lock holds")
	time.Sleep(300 * time.Millisecond)
	p.notYet(t, "dlock Acquire while etcdctl lock holds")
	if err := os.WriteFile(out, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := await(t, ctlDone, 15*time.Second, "etcdctl lock"); err != nil {
		t.Fatalf("etcdctl lock: %v", err)
	}
	lease := p.get(t, "dlock Acquire after etcdctl lock's command ended")
	if lease.Token() <= ctlRev {
		t.Errorf("dlock's token %d is not above etcdctl's ETCD_LOCK_REV %d", lease.Token(), ctlRev)
	}

	in2 := filepath.Join(dir, "in2")
	ctl2 := testenv.Etcdctl(t, eps, "lock", prefix+"/"+name, "--", "sh", "-c", `echo "$ETCD_LOCK_REV" > "$1.tmp" && mv "$1.tmp" "$1"`, "sh", in2)
	if err := ctl2.Start(); err != nil {
		t.Fatal(err)
	}
	ctl2Done := exited(ctl2)
	waitQueue(t, admin, prefix+"/"+name+"/", 2)
	time.Sleep(500 * time.Millisecond)
	if _, err := os.Stat(in2); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("etcdctl lock ran its command while dlock holds (stat: %v)", err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if rev := lockRev(t, waitFile(t, in2, 15*time.Second)); rev <= lease.Token() {
		t.Errorf("etcdctl's ETCD_LOCK_REV %d is not above dlock's token %d", rev, lease.Token())
	}
	if err := await(t, ctl2Done, 15*time.Second, "etcdctl lock"); err != nil {
		t.Fatalf("etcdctl lock: %v", err)
	}
}

// gauge is a holders gauge that processes share: a holder makes the
// directory held on entry and removes it on exit; an entry that finds it
// there already is an overlap, written down in the file overlaps. Every
// entry appends its side to the file log.
type gauge struct{ dir string }

// gaugeShell is the gauge's critical section for a shell: enter, hold
// 50ms, exit. $1 is the gauge's directory, $2 the side.
const gaugeShell = `mkdir "$1/held" 2>/dev/null || echo "$2" >> "$1/overlaps"; echo "$2" >> "$1/log"; sleep 0.05; rmdir "$1/held"`

func (g gauge) hold(side string) {
	if err := os.Mkdir(filepath.Join(g.dir, "held"), 0o755); errors.Is(err, fs.ErrExist) {
		appendTo(filepath.Join(g.dir, "overlaps"), side)
	}
	appendTo(filepath.Join(g.dir, "log"), side)
	time.Sleep(50 * time.Millisecond)
	_ = os.Remove(filepath.Join(g.dir, "held"))
}

func appendTo(path, line string) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		panic(err)
	}
	defer f.Close()
	_, _ = f.WriteString(line + "\n")
}

// TestEtcdctlLockContention: two dlock Lockers and two sequences of
// etcdctl lock processes take one name in turns; the gauge they share
// never sees two holders.
func TestEtcdctlLockContention(t *testing.T) {
	eps, _, prefix, ctx := interop(t, 120*time.Second)
	const name, rounds = "hot", 6
	g := gauge{dir: t.TempDir()}
	var wg sync.WaitGroup
	errs := make(chan error, 4*rounds)
	for i := range 2 {
		l := concLocker(t, eps, prefix)
		wg.Go(func() {
			for range rounds {
				lease, err := l.Acquire(ctx, name)
				if err != nil {
					errs <- fmt.Errorf("dlock %d: %w", i, err)
					return
				}
				g.hold("dlock")
				if err := lease.Release(ctx); err != nil {
					errs <- fmt.Errorf("dlock %d: release: %w", i, err)
				}
			}
		})
	}
	for i := range 2 {
		wg.Go(func() {
			for range rounds {
				cmd := testenv.Etcdctl(t, eps, "lock", prefix+"/"+name, "--", "sh", "-c", gaugeShell, "sh", g.dir, "etcdctl")
				if b, err := cmd.CombinedOutput(); err != nil {
					errs <- fmt.Errorf("etcdctl %d: %w: %s", i, err, b)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if b, err := os.ReadFile(filepath.Join(g.dir, "overlaps")); err == nil {
		t.Errorf("two holders at once, entering: %q", strings.Fields(string(b)))
	}
	b, _ := os.ReadFile(filepath.Join(g.dir, "log"))
	counts := map[string]int{}
	for _, side := range strings.Fields(string(b)) {
		counts[side]++
	}
	if counts["dlock"] != 2*rounds || counts["etcdctl"] != 2*rounds {
		t.Errorf("entries %v, want %d of each side", counts, 2*rounds)
	}
}

// TestEtcdctlLockCrash: an etcdctl lock killed with SIGKILL (its command
// with it) frees the lock for a waiting dlock Acquire once its session
// lease (--ttl 2) expires; a dlock holder whose client dies frees it for
// a waiting etcdctl lock once its own lease expires.
func TestEtcdctlLockCrash(t *testing.T) {
	eps, admin, prefix, ctx := interop(t, 60*time.Second)
	dir := t.TempDir()
	l := concLocker(t, eps, prefix)

	in := filepath.Join(dir, "in")
	ctl := testenv.Etcdctl(t, eps, "lock", "--ttl", "2", prefix+"/a", "--", "sh", "-c", `touch "$1"; exec sleep 60`, "sh", in)
	if err := ctl.Start(); err != nil {
		t.Fatal(err)
	}
	ctlDone := exited(ctl)
	waitFile(t, in, 15*time.Second)
	p := start(func() (*dlock.Lease, error) { return l.Acquire(ctx, "a") })
	p.notYet(t, "dlock Acquire while etcdctl lock holds")
	if err := syscall.Kill(-ctl.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	<-ctlDone
	lease := p.get(t, "dlock Acquire after etcdctl lock was killed")
	took := time.Since(killed)
	t.Logf("dlock acquired %v after etcdctl lock was killed", took)
	if took < time.Second {
		t.Errorf("dlock acquired %v after the kill, before the killed holder's 2s lease could expire", took)
	}
	_ = lease.Release(ctx)

	const ttl = 2 * time.Second
	holder := concLocker(t, eps, prefix, dlock.WithTTL(ttl))
	if _, err := holder.Acquire(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	in2 := filepath.Join(dir, "in2")
	ctl2 := testenv.Etcdctl(t, eps, "lock", prefix+"/b", "--", "touch", in2)
	if err := ctl2.Start(); err != nil {
		t.Fatal(err)
	}
	ctl2Done := exited(ctl2)
	waitQueue(t, admin, prefix+"/b/", 2)
	_ = drv(holder).Client().Close()
	crashed := time.Now()
	waitFile(t, in2, 30*time.Second)
	t.Logf("etcdctl lock ran its command %v after the dlock holder's client closed", time.Since(crashed))
	if err := await(t, ctl2Done, 15*time.Second, "etcdctl lock"); err != nil {
		t.Fatalf("etcdctl lock: %v", err)
	}
}

// lines reads r line by line into a channel, closed at EOF.
func lines(t testing.TB, cmd *exec.Cmd) <-chan string {
	t.Helper()
	r, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan string, 100)
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			ch <- sc.Text()
		}
	}()
	return ch
}

// awaitLine reads lines until one equals want.
func awaitLine(t testing.TB, ch <-chan string, want string) {
	t.Helper()
	receiveUntil(t, ch, "a line "+want, func(l string) bool { return l == want })
}

// TestEtcdctlElect: `etcdctl elect -l NAME` observes the dlock leader's
// value; `etcdctl elect NAME PROPOSAL` waits while a dlock candidate leads
// and is elected when it resigns, and dlock's Leader and Observe then
// report PROPOSAL with the key's create revision; when etcdctl resigns
// (SIGINT), a dlock candidate waiting behind it leads.
func TestEtcdctlElect(t *testing.T) {
	eps, admin, prefix, ctx := interop(t, 60*time.Second)
	const name = "svc"
	pfx := prefix + "/" + name
	obs, dch := observeNobody(t, ctx, eps, prefix, name)

	a := concLocker(t, eps, prefix)
	la := locktest.Must(t)(a.Campaign(ctx, name, "dlock-a"))
	listen := testenv.Etcdctl(t, eps, "elect", "-l", pfx)
	listened := lines(t, listen)
	if err := listen.Start(); err != nil {
		t.Fatal(err)
	}
	awaitLine(t, listened, "dlock-a")

	elect := testenv.Etcdctl(t, eps, "elect", pfx, "ctl-b")
	elected := lines(t, elect)
	if err := elect.Start(); err != nil {
		t.Fatal(err)
	}
	electDone := exited(elect)
	kvs := waitQueue(t, admin, pfx+"/", 2)
	select {
	case l := <-elected:
		t.Fatalf("etcdctl elect printed %q while dlock's candidate leads", l)
	case <-time.After(300 * time.Millisecond):
	}
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	awaitLine(t, elected, "ctl-b")
	ctlB := dlock.LeaderInfo{Value: "ctl-b", Token: uint64(kvs[1].CreateRevision)}
	dlockObserved(t, dch, ctlB)
	if got, err := obs.Leader(ctx, name); err != nil || got != ctlB {
		t.Errorf("dlock Leader = %+v, %v; want %+v", got, err, ctlB)
	}
	awaitLine(t, listened, "ctl-b")

	c := concLocker(t, eps, prefix)
	pc := start(func() (*dlock.Lease, error) { return c.Campaign(ctx, name, "dlock-c") })
	waitQueue(t, admin, pfx+"/", 2)
	pc.notYet(t, "dlock candidate behind etcdctl elect")
	if err := elect.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	lc := pc.get(t, "dlock candidate after etcdctl elect resigned")
	if err := await(t, electDone, 15*time.Second, "etcdctl elect"); err != nil {
		t.Errorf("etcdctl elect after SIGINT: %v", err)
	}
	dlockObserved(t, dch, dlock.LeaderInfo{Value: "dlock-c", Token: lc.Token()})
	awaitLine(t, listened, "dlock-c")
	_ = lc.Release(ctx)
}
