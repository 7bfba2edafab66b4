package etcdlock_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/etcdlock"
	"github.com/dlockgo/dlock/internal/testenv"
)

// Inspect, from another process's driver on the same prefix, lists the
// held mutexes (names nested in one another included), readers and
// leaders under a prefix with their tokens, owners, lease expiry and
// waiters, and nothing released, elsewhere, or outside the driver's
// prefix.
func TestInspect(t *testing.T) {
	eps := testenv.EtcdEndpoints(t)
	prefix := randomPrefix()
	ctx := t.Context()
	const ttl = 5 * time.Second
	l := newLocker(t, eps, prefix, dlock.WithTTL(ttl))
	other := drv(newLocker(t, eps, prefix))
	stranger := newLocker(t, eps, randomPrefix())

	if _, err := stranger.Acquire(ctx, "jobs/c"); err != nil {
		t.Fatal(err)
	}
	// A waiter queues behind jobs/a, a writer behind the readers.
	sc := testenv.NewInspectScene(t, ctx, l)
	a, ab, r1, r2, lead := sc.A, sc.AB, sc.R1, sc.R2, sc.Lead
	lease := etcdlock.SessionLease(drv(l), ttl)
	var got []driver.LockInfo
	var err error
	for deadline := time.Now().Add(5 * time.Second); ; {
		if got, err = other.Inspect(ctx, "jobs/"); err != nil {
			t.Fatal(err)
		}
		if len(got) > 0 && got[0].Waiters == 1 && got[len(got)-1].Waiters == 1 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	want := []struct {
		name    string
		mode    driver.Mode
		lease   *dlock.Lease
		owner   string
		waiters int
	}{
		{"jobs/a", driver.Exclusive, a, a.Owner(), 1},
		{"jobs/a/b", driver.Exclusive, ab, ab.Owner(), 0},
		{"jobs/e", driver.Leader, lead, "lease " + strconv.FormatInt(int64(lease), 16), 0},
		{"jobs/rw", driver.Read, r1, r1.Owner(), 1},
		{"jobs/rw", driver.Read, r2, r2.Owner(), 1},
	}
	if len(got) != len(want) {
		t.Fatalf("Inspect(jobs/) = %+v, want %d entries", got, len(want))
	}
	for i, w := range want {
		g := got[i]
		if g.Name != w.name || g.Mode != w.mode || g.Token != w.lease.Token() || g.Owner != w.owner || g.Waiters != w.waiters {
			t.Errorf("entry %d = %+v, want %s %v token %d owner %s waiters %d",
				i, g, w.name, w.mode, w.lease.Token(), w.owner, w.waiters)
		}
		if left := time.Until(g.Expires); left <= 0 || left > ttl {
			t.Errorf("entry %d expires in %v, want within the lease's %v", i, left, ttl)
		}
	}

	// The holding driver knows the leader's owner.
	mine, err := drv(l).Inspect(ctx, "jobs/e")
	if err != nil {
		t.Fatal(err)
	}
	if len(mine) != 1 || mine[0].Owner != lead.Owner() {
		t.Errorf("Inspect(jobs/e) on the leader's driver = %+v, want owner %s", mine, lead.Owner())
	}

	sc.Finish(t, ctx, other, other)
}
