package etcdlock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/dlockgo/dlock"
)

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
	la, err := a.Campaign(ctx, name, "dlock-a")
	if err != nil {
		t.Fatal(err)
	}
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
