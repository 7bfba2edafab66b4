package mysqllock_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/locktest"
	"github.com/dlockgo/dlock/mysqllock"
)

// TestKillLoss: KILL of the holder's connection frees the lock on the
// server at once; the holder's Done closes within the keep-alive period,
// and another client gets the lock with a greater token.
func TestKillLoss(t *testing.T) {
	ctx := testContext(t, 30*time.Second)
	o := mysqllock.Options{Table: testTable(t), KeepAlive: 100 * time.Millisecond}
	a, d := newLocker(t, o)
	b, _ := newLocker(t, o)
	adm := newAdmin(t)
	lease, err := a.Acquire(ctx, "kill/me")
	if err != nil {
		t.Fatal(err)
	}
	id := adm.holder(d.LockName("kill/me"))
	if id == 0 {
		t.Fatal("IS_USED_LOCK finds no holder")
	}
	adm.kill(id)
	killed := time.Now()
	// KILL returns before the killed connection's locks are free: the lock
	// is free once the connection is gone from the server.
	if !eventually(5*time.Second, func() bool { return !adm.alive(id) }) {
		t.Fatalf("connection %d still on the server 5s after KILL", id)
	}
	other, err := b.TryAcquire(ctx, "kill/me")
	if err != nil {
		t.Fatalf("TryAcquire once the killed connection is gone: %v", err)
	}
	defer other.Release(ctx)
	select {
	case <-lease.Done():
		t.Logf("Done closed %v after the KILL", time.Since(killed))
	case <-time.After(2 * time.Second):
		t.Fatal("Done not closed 2s after the holder's connection was killed")
	}
	if !errors.Is(lease.Err(), dlock.ErrLost) {
		t.Errorf("Err() = %v, want ErrLost", lease.Err())
	}
	if other.Token() <= lease.Token() {
		t.Errorf("new token %d not greater than the killed holder's %d", other.Token(), lease.Token())
	}
	if err := lease.Release(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Release after the KILL = %v, want ErrNotHeld", err)
	}
	if err := lease.Renew(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Renew after the KILL = %v, want ErrNotHeld", err)
	}
}

// TestRenew: Renew checks on the server, at once, that the lock is
// still held.
func TestRenew(t *testing.T) {
	ctx := testContext(t, 30*time.Second)
	a, d := newLocker(t, mysqllock.Options{KeepAlive: time.Hour})
	adm := newAdmin(t)
	lease, err := a.Acquire(ctx, "renew")
	if err != nil {
		t.Fatal(err)
	}
	if err := lease.Renew(ctx); err != nil {
		t.Fatalf("Renew while held: %v", err)
	}
	adm.kill(adm.holder(d.LockName("renew")))
	// The keep-alive period is an hour: only Renew can notice.
	if err := lease.Renew(ctx); !errors.Is(err, dlock.ErrNotHeld) || !errors.Is(err, dlock.ErrLost) {
		t.Errorf("Renew after the KILL = %v, want ErrNotHeld and ErrLost", err)
	}
	if !errors.Is(lease.Err(), dlock.ErrLost) {
		t.Errorf("Err() = %v, want ErrLost", lease.Err())
	}
}

// TestSilentHolder: a holder whose process stops (no keep-alive reaches the
// server) loses the lock after the TTL, the server's wait_timeout on its
// connection; it reports the loss when it runs again. On the caller's
// pool and on an exclusive pool opened from a URL whose ttl (an hour)
// differs from the acquisition's (1s). By construction: the freeze alone
// frees nothing (the lock is still held right after it), and the holder
// stays frozen for 10s, 10× the TTL, so only the acquisition's TTL can
// explain another client's grant before the holder resumes.
func TestSilentHolder(t *testing.T) {
	table := testTable(t)
	for _, mode := range []string{"caller's pool", "exclusive pool"} {
		t.Run(mode, func(t *testing.T) {
			ctx := testContext(t, 30*time.Second)
			o := mysqllock.Options{Table: table, KeepAlive: 100 * time.Millisecond}
			var a *dlock.Locker
			if mode == "exclusive pool" {
				var err error
				if a, err = dlock.Open(ctx, serverURL(t, "table="+table+"&keepalive=100ms&ttl=1h")); err != nil {
					t.Fatal(err)
				}
				defer a.Close()
			} else {
				a, _ = newLocker(t, o)
			}
			b, _ := newLocker(t, o)
			lease, err := a.Acquire(ctx, "silent", dlock.WithTTL(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			const freeze = 10 * time.Second
			a.Driver().(*mysqllock.Driver).Freeze(freeze)
			start := time.Now()
			if l, err := b.TryAcquire(ctx, "silent"); !errors.Is(err, dlock.ErrNotAcquired) {
				t.Errorf("TryAcquire right after the holder went silent = %v, want ErrNotAcquired", err)
				if err == nil {
					_ = l.Release(ctx)
				}
			}
			other, err := b.Acquire(ctx, "silent")
			if err != nil {
				t.Fatal(err)
			}
			took := time.Since(start)
			t.Logf("another client acquired %v after the holder went silent (TTL 1s)", took)
			if took >= freeze {
				t.Errorf("another client acquired %v after the holder went silent, once it had resumed: the TTL (1s) did not free the lock", took)
			}
			defer other.Release(ctx)
			select {
			case <-lease.Done():
			case <-time.After(freeze + 5*time.Second):
				t.Fatal("the silent holder's Done did not close after it resumed")
			}
			if !errors.Is(lease.Err(), dlock.ErrLost) {
				t.Errorf("Err() = %v, want ErrLost", lease.Err())
			}
		})
	}
}

// TestCrashedProcess: a process that dies closes its sockets; the server
// frees its lock at once.
func TestCrashedProcess(t *testing.T) {
	ctx := testContext(t, 30*time.Second)
	table := testTable(t)
	var socks sockets
	a := lockerOn(t, newDB(t, &socks), mysqllock.Options{Table: table, KeepAlive: 100 * time.Millisecond})
	b, _ := newLocker(t, mysqllock.Options{Table: table})
	lease, err := a.Acquire(ctx, "crash")
	if err != nil {
		t.Fatal(err)
	}
	socks.cut()
	start := time.Now()
	other, err := b.Acquire(ctx, "crash")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("another client acquired %v after the holder's sockets closed", time.Since(start))
	if took := time.Since(start); took > time.Second {
		t.Errorf("another client waited %v after the holder's sockets closed", took)
	}
	defer other.Release(ctx)
	select {
	case <-lease.Done():
	case <-time.After(2 * time.Second):
		t.Fatal("Done not closed after the holder's connection was cut")
	}
}

// openDriver opens a driver from a URL of the test server (its own pool,
// whose sockets the driver watches), with the query query.
func openDriver(t *testing.T, query string) *mysqllock.Driver {
	t.Helper()
	l, err := dlock.Open(testContext(t, 10*time.Second), serverURL(t, query))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l.Driver().(*mysqllock.Driver)
}

// killNow runs KILL id and returns the instant it returned.
func (a *admin) killNow(id int64) time.Time {
	a.kill(id)
	return time.Now()
}

// killer is a locktest.DriverKill's Kill: KILL of the connection
// holding r's lock.
func (a *admin) killer(d *mysqllock.Driver) func(t *testing.T, r driver.Request) (time.Time, func() bool) {
	return func(t *testing.T, r driver.Request) (time.Time, func() bool) {
		id := a.holder(d.LockName(r.Name))
		return a.killNow(id), func() bool { return !a.alive(id) }
	}
}

// TestKillSeenAtOnce: KILL of the holder's connection ends the lock at
// once, in each of 20 runs, seen by the watch on the socket: with a
// keep-alive period and a TTL of an hour no check falls due.
func TestKillSeenAtOnce(t *testing.T) {
	d := openDriver(t, "table="+testTable(t)+"&keepalive=1h&ttl=1h")
	r := driver.Request{Name: "watch/kill", TTL: time.Hour}
	locktest.DriverKill{Driver: d, Requests: map[string]driver.Request{"mutex": r}, Kill: newAdmin(t).killer(d)}.SeenAtOnce(t, 20)
}

// TestCheckSeesKillWithoutWatch: a holder whose goroutines have not run
// since its connection was killed (here: no watch goroutine, and a
// keep-alive period of an hour) sees the loss at its first Check, from its
// look at the socket; Check allocates nothing while the lock is held.
func TestCheckSeesKillWithoutWatch(t *testing.T) {
	d := openDriver(t, "table="+testTable(t)+"&keepalive=1h&ttl=1h")
	mysqllock.NoWatch(d, true)
	r := driver.Request{Name: "watch/peek", TTL: time.Hour}
	locktest.DriverKill{Driver: d, Requests: map[string]driver.Request{"mutex": r}, Kill: newAdmin(t).killer(d)}.CheckSeesKill(t)
}

// TestWatchSurvivesChecks: the watch pauses for every statement on the
// held connection (Renew, keep-alive checks every 10ms) without taking
// bytes from go-sql-driver, and still sees a later KILL at once; a
// released lock's connection goes back to the pool in working order.
func TestWatchSurvivesChecks(t *testing.T) {
	ctx := testContext(t, 30*time.Second)
	d := openDriver(t, "table="+testTable(t)+"&keepalive=10ms")
	adm := newAdmin(t)
	for round := range 2 {
		r := driver.Request{Name: "watch/checks", Owner: randomHex(16), TTL: 30 * time.Second}
		g, err := d.TryLock(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		lost := locktest.LostCh(g)
		if g.Check == nil {
			t.Fatal("Grant.Check is nil")
		}
		deadline := time.Now().Add(300 * time.Millisecond)
		for time.Now().Before(deadline) {
			if _, err := d.Renew(ctx, r); err != nil {
				t.Fatalf("Renew: %v", err)
			}
			if err := g.Check(time.Now()); err != nil {
				t.Fatalf("Check: %v", err)
			}
		}
		if round == 0 {
			if err := d.Unlock(ctx, r); err != nil {
				t.Fatal(err)
			}
			continue
		}
		killed := adm.killNow(adm.holder(d.LockName(r.Name)))
		select {
		case <-lost:
			t.Logf("loss signalled %v after the KILL", time.Since(killed))
		case <-time.After(time.Second):
			t.Fatal("loss not signalled 1s after the KILL")
		}
	}
}

// TestOpenErrorsNameTheCause: a wrong password is the server refusing the
// credentials (it answered), a closed port is an unreachable server, and
// a server that accepts and never answers is a timeout.
func TestOpenErrorsNameTheCause(t *testing.T) {
	ctx := testContext(t, 30*time.Second)
	u := serverURL(t, "")
	host := u[strings.LastIndex(u, "@")+1 : strings.LastIndex(u, "/")]
	silent := testenv.SilentServer(t)
	for _, c := range []struct {
		what, url string
		want      []string
		not       string
	}{
		{"wrong password", "mysql://root:wrong-password@" + host + "/test", []string{"refused the credentials", "1045"}, "did not answer"},
		{"unknown user", "mysql://nobody_" + randomHex(3) + ":x@" + host + "/test", []string{"refused the credentials", "Access denied"}, "did not answer"},
		{"closed port", "mysql://root@127.0.0.1:1/test?timeout=500ms", []string{"cannot reach the server at 127.0.0.1:1", "refused"}, "refused the credentials"},
		{"silent server", "mysql://root@" + silent + "/test", []string{"did not complete the connection within 500ms"}, "refused"},
		{"silent server, short context", "mysql://root@" + silent + "/test", []string{"the context ended first"}, "refused"},
	} {
		restore := mysqllock.SetOpenTimeout(500 * time.Millisecond)
		octx := ctx
		if strings.HasSuffix(c.what, "short context") {
			var cancel context.CancelFunc
			octx, cancel = context.WithTimeout(ctx, 200*time.Millisecond)
			defer cancel()
		}
		start := time.Now()
		l, err := dlock.Open(octx, c.url)
		restore()
		if err == nil {
			_ = l.Close()
			t.Errorf("%s: Open succeeded", c.what)
			continue
		}
		t.Logf("%s (%v): %v", c.what, time.Since(start).Round(time.Millisecond), err)
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: Open error %q does not say %q", c.what, err, w)
			}
		}
		if strings.Contains(err.Error(), c.not) {
			t.Errorf("%s: Open error %q says %q", c.what, err, c.not)
		}
		if strings.Contains(err.Error(), "wrong-password") {
			t.Errorf("%s: Open error shows the password: %v", c.what, err)
		}
	}
}

// TestStatementsLookFirst: a statement on a held lock's connection (the
// keep-alive check, Renew's check, Unlock's RELEASE_LOCK) is only sent
// after a look at the socket found the server still there. A Check skips
// the socket while a statement runs on it, so a holder resumed after a
// pause, whose keep-alive check falls due at once, would otherwise have
// its Checks say "held" until a check on a connection already closed
// failed. Here the connection is killed and gone before the statement
// falls due, with no watch goroutine and no Check looking: the loss must
// come from the look, with no statement sent ("the server closed
// connection"), not from a failed statement ("invalid connection").
func TestStatementsLookFirst(t *testing.T) {
	ctx := testContext(t, 60*time.Second)
	adm := newAdmin(t)
	const byLook = "the server closed connection"
	for _, path := range []string{"keep-alive", "renew", "unlock"} {
		t.Run(path, func(t *testing.T) {
			keepalive := "1h"
			if path == "keep-alive" {
				// A check every 200ms: only the keep-alive loop can find the
				// loss, and only on its way to a check.
				keepalive = "200ms"
			}
			d := openDriver(t, "table="+testTable(t)+"&keepalive="+keepalive+"&ttl=1h")
			mysqllock.NoWatch(d, true)
			r := driver.Request{Name: "lookfirst/" + path, Owner: randomHex(16), TTL: time.Hour}
			g, err := d.TryLock(ctx, r)
			if err != nil {
				t.Fatal(err)
			}
			lost := locktest.LostCh(g)
			id := adm.holder(d.LockName(r.Name))
			adm.kill(id)
			if !eventually(5*time.Second, func() bool { return !adm.alive(id) }) {
				t.Fatalf("connection %d still alive after KILL", id)
			}
			time.Sleep(10 * time.Millisecond) // the close's FIN has surely arrived
			var got error
			switch path {
			case "keep-alive":
				select {
				case <-lost:
				case <-time.After(5 * time.Second):
					t.Fatal("loss not signalled 5s after the KILL")
				}
				got = g.Check(time.Now())
			case "renew":
				_, got = d.Renew(ctx, r)
				if !errors.Is(got, driver.ErrNotHeld) {
					t.Errorf("Renew = %v, want ErrNotHeld", got)
				}
			case "unlock":
				got = d.Unlock(ctx, r)
				if !errors.Is(got, driver.ErrNotHeld) {
					t.Errorf("Unlock = %v, want ErrNotHeld", got)
				}
			}
			if got == nil || !strings.Contains(got.Error(), byLook) {
				t.Errorf("the loss = %v; want it found by the look before the statement (%q)", got, byLook)
			}
		})
	}
}

// TestKillEndsLease: a lease, as a user holds it, ends after a KILL of its
// connection, in each of 20 runs, by the watch on the socket: with a
// keep-alive interval and a TTL of an hour, only the socket can explain
// the end within ServerKill's hang bound of 2s. So it is on the pool a
// mysql:// URL makes, and on the caller's *sql.DB made from a mysql.Config
// given to WatchSockets, whose sockets the driver watches as a URL
// driver does.
func TestKillEndsLease(t *testing.T) {
	for _, c := range []struct {
		pool string
		open func(t *testing.T) *dlock.Locker
	}{
		{"url", func(t *testing.T) *dlock.Locker {
			return locktest.Opened(t)(dlock.Open(testContext(t, 10*time.Second), serverURL(t, "table="+testTable(t)+"&keepalive=1h&ttl=1h")))
		}},
		{"callers-pool", func(t *testing.T) *dlock.Locker {
			cfg, err := testenv.MySQLConfig(testenv.MySQLDSN(t))
			if err != nil {
				t.Fatal(err)
			}
			socks := mysqllock.WatchSockets(cfg)
			conn, err := mysql.NewConnector(cfg)
			if err != nil {
				t.Fatal(err)
			}
			db := sql.OpenDB(conn)
			t.Cleanup(func() { _ = db.Close() })
			return lockerOn(t, db, mysqllock.Options{KeepAlive: time.Hour, Sockets: socks}, dlock.WithTTL(time.Hour))
		}},
	} {
		t.Run(c.pool, func(t *testing.T) {
			l := c.open(t)
			d := l.Driver().(*mysqllock.Driver)
			adm := newAdmin(t)
			locktest.ServerKill(t, l, "watch/"+c.pool, 20, 2*time.Second,
				func(t *testing.T, lease *dlock.Lease) time.Time {
					return adm.killNow(adm.holder(d.LockName(lease.Name())))
				})
		})
	}
}
