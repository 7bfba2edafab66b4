package etcdlock_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/locktest"
)

// next receives from an Observe channel, failing t after 30s (a hang
// bound, over 10× a crashed leader's TTL of 2s).
func next(t *testing.T, ch <-chan dlock.LeaderInfo, what string) dlock.LeaderInfo {
	t.Helper()
	select {
	case info, ok := <-ch:
		if !ok {
			t.Fatalf("%s: the channel closed", what)
		}
		return info
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: nothing observed within 30s", what)
	}
	return dlock.LeaderInfo{}
}

// TestElectionObserve: an observer sees nobody, then each leader in turn
// with its value and token: the first candidate, the second when the first
// resigns, the third when the second's process dies, and nobody when the
// third resigns. Leader agrees at each step; the channel closes when the
// observer's context ends, and when the driver closes.
func TestElectionObserve(t *testing.T) {
	eps := testenv.EtcdEndpoints(t)
	prefix := randomPrefix()
	ctx := locktest.Context(t, 60*time.Second)
	const ttl = 2 * time.Second
	a := newLocker(t, eps, prefix, dlock.WithTTL(ttl))
	b := newLocker(t, eps, prefix, dlock.WithTTL(ttl))
	c := newLocker(t, eps, prefix, dlock.WithTTL(ttl))
	obs := newLocker(t, eps, prefix)
	octx, ocancel := context.WithCancel(ctx)
	defer ocancel()
	ch, err := obs.Observe(octx, "svc")
	if err != nil {
		t.Fatal(err)
	}
	if got := next(t, ch, "before any campaign"); got != (dlock.LeaderInfo{}) {
		t.Fatalf("first observed %+v, want nobody", got)
	}
	check := func(want dlock.LeaderInfo, what string) {
		t.Helper()
		if got := next(t, ch, what); got != want {
			t.Fatalf("%s: observed %+v, want %+v", what, got, want)
		}
		got, err := obs.Leader(ctx, "svc")
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("%s: Leader = %+v, want %+v", what, got, want)
		}
	}

	la := locktest.Must(t)(a.Campaign(ctx, "svc", "a:1"))
	check(dlock.LeaderInfo{Value: "a:1", Token: la.Token()}, "a elected")
	// The mutex and the semaphore called svc are other locks.
	if m, err := b.TryAcquire(ctx, "svc"); err != nil {
		t.Errorf("the mutex svc: %v", err)
	} else {
		_ = m.Release(ctx)
	}
	pb := start(func() (*dlock.Lease, error) { return b.Campaign(ctx, "svc", "b:2") })
	pb.notYet(t, "b")
	pc := start(func() (*dlock.Lease, error) { return c.Campaign(ctx, "svc", "c:3") })
	pc.notYet(t, "c")
	select {
	case info := <-ch:
		t.Fatalf("observed %+v while a still leads: consecutive values must differ", info)
	default:
	}

	if err := la.Release(ctx); err != nil { // resign
		t.Fatal(err)
	}
	lb := pb.get(t, "b")
	if lb.Token() <= la.Token() {
		t.Errorf("b's token %d not above a's %d", lb.Token(), la.Token())
	}
	check(dlock.LeaderInfo{Value: "b:2", Token: lb.Token()}, "a resigned")

	_ = drv(b).Client().Close() // b's process dies
	crashed := time.Now()
	lc := pc.get(t, "c")
	check(dlock.LeaderInfo{Value: "c:3", Token: lc.Token()}, "b crashed")
	t.Logf("c led %v after b's crash", time.Since(crashed))
	select {
	case <-lb.Done():
	case <-time.After(time.Second):
		t.Error("the crashed leader's Done is not closed")
	}

	if err := lc.Release(ctx); err != nil {
		t.Fatal(err)
	}
	check(dlock.LeaderInfo{}, "c resigned")

	ocancel()
	select {
	case _, ok := <-ch:
		if ok {
			t.Error("observed a value after the context ended")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the channel is not closed after the context ended")
	}
}

// TestObserveClosesWithDriver: Close ends every observer; none leaks.
func TestObserveClosesWithDriver(t *testing.T) {
	eps := testenv.EtcdEndpoints(t)
	ctx := locktest.Context(t, 20*time.Second)
	l, err := dlock.New(drv(newLocker(t, eps, randomPrefix())))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Leader(ctx, "svc"); err != nil { // the connection is up
		t.Fatal(err)
	}
	var chans []<-chan dlock.LeaderInfo
	for range 5 {
		ch, err := l.Observe(ctx, "svc")
		if err != nil {
			t.Fatal(err)
		}
		chans = append(chans, ch) // never read: Close must not wait for a reader
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for i, ch := range chans {
		select {
		case _, ok := <-ch:
			if ok {
				// the pending first value may still be delivered
				if _, ok := <-ch; ok {
					t.Errorf("observer %d: a second value after Close", i)
				}
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("observer %d: the channel is not closed after Close", i)
		}
	}
	if _, err := l.Observe(ctx, "svc"); !errors.Is(err, dlock.ErrClosed) {
		t.Errorf("Observe after Close = %v, want ErrClosed", err)
	}
	// The client may keep its watch stream; the observers must be gone.
	buf := make([]byte, 1<<20)
	if stacks := string(buf[:runtime.Stack(buf, true)]); strings.Contains(stacks, "etcdlock.(*observer)") {
		t.Errorf("an observer's goroutine is still running after Close:\n%s", stacks)
	}
}
