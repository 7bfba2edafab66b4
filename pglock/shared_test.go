package pglock_test

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
	"github.com/dlockgo/dlock/pglock"
)

// appDriver opens a driver whose sessions carry a fresh application_name,
// which it returns, so that pg_stat_activity counts its connections.
func appDriver(t *testing.T, o pglock.Options) (*pglock.Driver, string) {
	t.Helper()
	app := "pglock-shared-" + randomHex(4)
	cfg := config(t)
	cfg.RuntimeParams["application_name"] = app
	if o.Table == "" {
		o.Table = table
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d, err := pglock.NewDriver(ctx, cfg, &o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d, app
}

// connections returns the number of server connections named app.
func (a *admin) connections(t testing.TB, app string) int {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	var n int
	if err := a.c.QueryRow(context.Background(), "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", app).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestManyLocksFewConnections: one driver holds 2,000 locks at once on
// 2000/DefaultSessionLocks sessions (rounded up), and the server sees no
// more connections than those and the idle ones.
func TestManyLocksFewConnections(t *testing.T) {
	ctx := testContext(t, 120*time.Second)
	const n = 2000
	adm := newAdmin(t)
	d, app := appDriver(t, pglock.Options{})
	rs := locktest.HoldMany(t, ctx, d, "shared/many/"+randomHex(4)+"/", n)
	sessions := (n + pglock.DefaultSessionLocks - 1) / pglock.DefaultSessionLocks
	if got := pglock.Sessions(d); got != sessions {
		t.Errorf("%d locks on %d sessions, want %d", n, got, sessions)
	}
	conns := adm.connections(t, app)
	t.Logf("%d locks held on %d sessions, %d server connections", n, pglock.Sessions(d), conns)
	if conns > sessions+pglock.DefaultMaxIdle {
		t.Errorf("%d server connections for %d locks, want at most %d", conns, n, sessions+pglock.DefaultMaxIdle)
	}
	var held int
	adm.mu.Lock()
	err := adm.c.QueryRow(ctx, `SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid)
WHERE l.locktype = 'advisory' AND l.granted AND a.application_name = $1`, app).Scan(&held)
	adm.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if held != n {
		t.Errorf("the server shows %d advisory locks held by the driver's sessions, want %d", held, n)
	}
	locktest.UnlockAll(t, ctx, d, rs)
	if got := pglock.Sessions(d); got != 0 {
		t.Errorf("%d sessions left after every release, want 0", got)
	}
	if idle := pglock.Idle(d); idle == 0 || idle > pglock.DefaultMaxIdle {
		t.Errorf("%d idle connections after every release, want 1..%d", idle, pglock.DefaultMaxIdle)
	}
}

// TestLostSessionTakesItsLocks: terminating one session's backend ends
// every lock on it at once (each Lost closes, Check and Release report the
// loss, the server frees them), and no lock of another session.
func TestLostSessionTakesItsLocks(t *testing.T) {
	ctx := testContext(t, 60*time.Second)
	adm := newAdmin(t)
	l := newLocker(t, pglock.Options{SessionLocks: 10, Keepalive: time.Hour})
	d := l.Driver().(*pglock.Driver)
	locktest.SessionLoss{
		Locker:     l,
		Other:      newLocker(t, pglock.Options{}),
		PerSession: 10,
		Session: func(t *testing.T, lease *dlock.Lease) string {
			return strconv.FormatUint(uint64(pglock.HolderPID(d, lease.Owner())), 10)
		},
		End: func(t *testing.T, session string) {
			pid, _ := strconv.ParseUint(session, 10, 32)
			adm.terminateNow(t, uint32(pid))
		},
	}.Run(t, ctx, "shared/lost/"+randomHex(4)+"/")
}

// TestWaitersShareOneServerWait: 500 goroutines wait for one name through
// one driver while another driver holds it: the server sees one waiting
// request, the driver a handful of connections, and each goroutine then
// gets the lock in turn, alone, with a token above the last.
func TestWaitersShareOneServerWait(t *testing.T) {
	ctx := testContext(t, 120*time.Second)
	const waiters = 500
	adm := newAdmin(t)
	d, app := appDriver(t, pglock.Options{})
	l, err := dlock.New(d)
	if err != nil {
		t.Fatal(err)
	}
	holder := newLocker(t, pglock.Options{})
	name := "shared/wait/" + randomHex(4)
	first, err := holder.Acquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	turns := locktest.StartTurns(t, ctx, []*dlock.Locker{l}, name, waiters)
	if !waitUntil(10*time.Second, func() bool { _, w := adm.lockRows(t, table, name); return w == 1 }) {
		t.Fatal("no waiting request on the server")
	}
	time.Sleep(200 * time.Millisecond) // let every goroutine get to its wait
	if _, w := adm.lockRows(t, table, name); w != 1 {
		t.Errorf("%d waiting requests on the server from one driver, want 1", w)
	}
	conns := adm.connections(t, app)
	t.Logf("%d goroutines waiting: %d server connections", waiters, conns)
	if conns > 1+pglock.DefaultMaxIdle {
		t.Errorf("%d server connections for %d waiters on one name, want at most %d", conns, waiters, 1+pglock.DefaultMaxIdle)
	}
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	turns.Check(first.Token())
}

// TestOwnersOfOneDriverExclude: two owners of one driver exclude each
// other on one name whatever their sessions (the driver answers the try
// at once, and the wait ends at the release); two readers of one driver
// share the lock on two sessions.
func TestOwnersOfOneDriverExclude(t *testing.T) {
	ctx := testContext(t, 30*time.Second)
	adm := newAdmin(t)
	d := newDriver(t, pglock.Options{})
	name := "shared/owners/" + randomHex(4)
	a := driver.Request{Name: name, Owner: randomHex(16), TTL: time.Minute}
	b := driver.Request{Name: name, Owner: randomHex(16), TTL: time.Minute}
	if _, err := d.TryLock(ctx, a); err != nil {
		t.Fatal(err)
	}
	_, err := d.TryLock(ctx, b)
	if held, ok := errors.AsType[*driver.HeldError](err); !ok || held.Name != name {
		t.Fatalf("TryLock of a second owner = %v, want a *HeldError", err)
	}
	got := make(chan error, 1)
	go func() { _, err := d.Lock(ctx, b); got <- err }()
	quiet(t, got, 200*time.Millisecond, "Lock of a second owner returned while the first holds")
	if err := d.Unlock(ctx, a); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("Lock after the release = %v", err)
	}
	if err := d.Unlock(ctx, b); err != nil {
		t.Fatal(err)
	}

	r1 := driver.Request{Name: name, Owner: randomHex(16), TTL: time.Minute, Mode: driver.Read}
	r2 := driver.Request{Name: name, Owner: randomHex(16), TTL: time.Minute, Mode: driver.Read}
	for _, r := range []driver.Request{r1, r2} {
		if _, err := d.TryLock(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if h, _ := adm.keyRows(t, pglock.ModeKey(table, driver.Read, name, 0)); len(h) != 2 || h[0] == h[1] {
		t.Errorf("two readers of one driver held by sessions %v, want two", h)
	}
	w := driver.Request{Name: name, Owner: randomHex(16), TTL: time.Minute, Mode: driver.Write}
	if _, err := d.TryLock(ctx, w); !errors.Is(err, driver.ErrNotAcquired) {
		t.Errorf("TryLock of a writer while readers hold = %v, want ErrNotAcquired", err)
	}
	for _, r := range []driver.Request{r1, r2} {
		if err := d.Unlock(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSessionLocksURL: session_locks sets how many locks share a session.
func TestSessionLocksURL(t *testing.T) {
	ctx := testContext(t, 30*time.Second)
	l, err := dlock.Open(ctx, testURL(t, "", "table", table, "session_locks", "2"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	d := l.Driver().(*pglock.Driver)
	base := "shared/url/" + randomHex(4) + "/"
	for i := range 4 {
		if _, err := l.TryAcquire(ctx, fmt.Sprintf("%s%d", base, i)); err != nil {
			t.Fatal(err)
		}
	}
	if n := pglock.Sessions(d); n != 2 {
		t.Errorf("4 locks with session_locks=2 on %d sessions, want 2", n)
	}
}
