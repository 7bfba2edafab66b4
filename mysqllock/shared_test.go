package mysqllock_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/locktest"
	"github.com/dlockgo/dlock/mysqllock"
)

// TestManyLocksFewConnections: one driver holds 2,000 locks at once on
// 2000/DefaultSessionLocks sessions (rounded up), each a connection of the
// pool, and the server has every lock on one of those connections; after
// the releases, every connection is back in the pool.
func TestManyLocksFewConnections(t *testing.T) {
	ctx := testContext(t, 120*time.Second)
	const n = 2000
	adm := newAdmin(t)
	_, d := newLocker(t, mysqllock.Options{})
	rs := locktest.HoldMany(t, ctx, d, "shared/many/"+randomHex(4)+"/", n)
	sessions := (n + mysqllock.DefaultSessionLocks - 1) / mysqllock.DefaultSessionLocks
	if got := mysqllock.Sessions(d); got != sessions {
		t.Errorf("%d locks on %d sessions, want %d", n, got, sessions)
	}
	if inUse := d.DB().Stats().InUse; inUse != sessions {
		t.Errorf("%d connections checked out for %d locks, want %d", inUse, n, sessions)
	}
	holders := map[int64]int{}
	for _, r := range rs {
		id := adm.holder(d.LockName(r.Name))
		if id == 0 {
			t.Fatalf("%s: the server has it free", r.Name)
		}
		holders[id]++
	}
	t.Logf("%d locks held on %d sessions, %d server connections", n, mysqllock.Sessions(d), len(holders))
	if len(holders) != sessions {
		t.Errorf("the server has the locks on %d connections, want %d", len(holders), sessions)
	}
	locktest.UnlockAll(t, ctx, d, rs)
	if got := mysqllock.Sessions(d); got != 0 {
		t.Errorf("%d sessions left after every release, want 0", got)
	}
	if inUse := d.DB().Stats().InUse; inUse != 0 {
		t.Errorf("%d connections still checked out after every release, want 0", inUse)
	}
}

// TestLostSessionTakesItsLocks: killing one session's connection ends
// every lock on it at once (each Done closes, Err and Release report the
// loss, the server frees them), and no lock of another session.
func TestLostSessionTakesItsLocks(t *testing.T) {
	ctx := testContext(t, 60*time.Second)
	adm := newAdmin(t)
	// From a URL, so that the driver watches its sockets: the kill, not a
	// keep-alive check, ends the locks.
	table := testTable(t)
	l, err := dlock.Open(ctx, serverURL(t, "table="+table+"&session_locks=10&keepalive=1h"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	d := l.Driver().(*mysqllock.Driver)
	other, _ := newLocker(t, mysqllock.Options{Table: table})
	locktest.SessionLoss{
		Locker:     l,
		Other:      other,
		PerSession: 10,
		Session: func(t *testing.T, lease *dlock.Lease) string {
			return strconv.FormatInt(adm.holder(d.LockName(lease.Name())), 10)
		},
		End: func(t *testing.T, session string) {
			id, _ := strconv.ParseInt(session, 10, 64)
			adm.kill(id)
		},
	}.Run(t, ctx, "shared/lost/"+randomHex(4)+"/")
}

// TestSessionPerTTL: locks of different TTLs (in whole seconds) never
// share a session, whose wait_timeout is its locks' TTL; locks of one TTL
// do. (That the server ends a silent session after its wait_timeout is
// the conformance suite's Crash.)
func TestSessionPerTTL(t *testing.T) {
	ctx := testContext(t, 30*time.Second)
	adm := newAdmin(t)
	_, d := newLocker(t, mysqllock.Options{})
	base := "shared/ttl/" + randomHex(4) + "/"
	ttls := []time.Duration{10 * time.Second, 20 * time.Second, 10 * time.Second, 2500 * time.Millisecond}
	for i, ttl := range ttls {
		r := driver.Request{Name: fmt.Sprintf("%s%d", base, i), Owner: randomHex(16), TTL: ttl}
		if _, err := d.TryLock(ctx, r); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = d.Unlock(ctx, r) }()
	}
	if got := mysqllock.Sessions(d); got != 3 {
		t.Errorf("locks of 3 TTLs on %d sessions, want 3", got)
	}
	if a, b := adm.holder(d.LockName(base+"0")), adm.holder(d.LockName(base+"2")); a != b {
		t.Errorf("two locks of one TTL on connections %d and %d, want one", a, b)
	}
	if a, c := adm.holder(d.LockName(base+"0")), adm.holder(d.LockName(base+"3")); a == c {
		t.Errorf("locks of TTLs 10s and 2.5s on one connection, %d", a)
	}
}

// TestCancelledReleaseKeepsSession: a release whose context has ended
// returns at once, and neither it nor a check whose context ends cancels
// a statement on the shared connection (go-sql-driver would close it, and
// every lock of the session with it): the session's other lock stays
// held, and the released lock becomes free.
func TestCancelledReleaseKeepsSession(t *testing.T) {
	ctx := testContext(t, 30*time.Second)
	adm := newAdmin(t)
	_, d := newLocker(t, mysqllock.Options{})
	base := "shared/cancel/" + randomHex(4) + "/"
	a := driver.Request{Name: base + "a", Owner: randomHex(16), TTL: time.Minute}
	b := driver.Request{Name: base + "b", Owner: randomHex(16), TTL: time.Minute}
	for _, r := range []driver.Request{a, b} {
		if _, err := d.TryLock(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	id := adm.holder(d.LockName(b.Name))
	if adm.holder(d.LockName(a.Name)) != id {
		t.Fatal("the two locks are not on one session")
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := d.Renew(done, b); !errors.Is(err, context.Canceled) {
		t.Errorf("Renew with an ended context = %v, want context.Canceled", err)
	}
	short, cancelShort := context.WithTimeout(ctx, time.Microsecond)
	defer cancelShort()
	<-short.Done()
	err := d.Unlock(short, a)
	t.Logf("Unlock with an ended context: %v", err)
	if !eventually(5*time.Second, func() bool { return adm.holder(d.LockName(a.Name)) == 0 }) {
		t.Errorf("%s still held 5s after its release", a.Name)
	}
	if _, err := d.Renew(ctx, b); err != nil {
		t.Errorf("Renew of the session's other lock: %v", err)
	}
	if got := adm.holder(d.LockName(b.Name)); got != id {
		t.Errorf("the other lock is on connection %d, want %d", got, id)
	}
	if err := d.Unlock(ctx, b); err != nil {
		t.Errorf("Unlock of the other lock: %v", err)
	}
}

// TestSessionLocksURL: session_locks sets how many locks share a session.
func TestSessionLocksURL(t *testing.T) {
	ctx := testContext(t, 30*time.Second)
	l, err := dlock.Open(ctx, serverURL(t, "table="+testTable(t)+"&session_locks=2"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	d := l.Driver().(*mysqllock.Driver)
	base := "shared/url/" + randomHex(4) + "/"
	for i := range 4 {
		if _, err := l.TryAcquire(ctx, fmt.Sprintf("%s%d", base, i)); err != nil {
			t.Fatal(err)
		}
	}
	if n := mysqllock.Sessions(d); n != 2 {
		t.Errorf("4 locks with session_locks=2 on %d sessions, want 2", n)
	}
}
