package pglock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/locktest"
	"github.com/dlockgo/dlock/pglock"
)

// kindRequests are a request of every kind the driver offers, on name.
func kindRequests(name string) map[string]driver.Request {
	owner := func() string { return randomHex(16) }
	return map[string]driver.Request{
		"mutex":  {Name: name, Owner: owner()},
		"read":   {Name: name, Owner: owner(), Mode: driver.Read},
		"write":  {Name: name + "/w", Owner: owner(), Mode: driver.Write},
		"permit": {Name: name, Owner: owner(), Mode: driver.Permit, Limit: 2},
		"leader": {Name: name, Owner: owner(), Mode: driver.Leader, Value: "me"},
	}
}

// terminateNow ends the session pid with pg_terminate_backend, which
// returns once the signal is sent (not when the backend has gone), and
// returns the instant it returned.
func (a *admin) terminateNow(t testing.TB, pid uint32) time.Time {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	var ok bool
	if err := a.c.QueryRow(context.Background(), "SELECT pg_terminate_backend($1)", int32(pid)).Scan(&ok); err != nil || !ok {
		t.Fatalf("pg_terminate_backend(%d) = %v, %v", pid, ok, err)
	}
	return time.Now()
}

// terminator is a locktest.DriverKill's Kill: pg_terminate_backend of the
// session holding r's lock.
func (a *admin) terminator(d *pglock.Driver) func(t *testing.T, r driver.Request) (time.Time, func() bool) {
	return func(t *testing.T, r driver.Request) (time.Time, func() bool) {
		pid := pglock.HolderPID(d, r.Owner)
		return a.terminateNow(t, pid), func() bool { return !a.alive(t, pid) }
	}
}

// TestTerminateSeenAtOnce: for every kind of lock, pg_terminate_backend of
// the holding session ends the hold at once, seen by the watch on the
// socket (the keep-alive interval is an hour and the requests have no
// TTL, so no ping falls due), in each of 20 runs.
func TestTerminateSeenAtOnce(t *testing.T) {
	adm := newAdmin(t)
	d := newDriver(t, pglock.Options{Keepalive: time.Hour, MaxIdle: 1})
	locktest.DriverKill{Driver: d, Requests: kindRequests("watch/" + randomHex(4)), Kill: adm.terminator(d)}.SeenAtOnce(t, 20)
}

// TestCheckSeesCloseWithoutKeeper: a holder whose goroutines have not run
// since its session was terminated (here: no keeper at all) sees the loss
// at its first Check, from its look at the socket, for every kind; and
// Check allocates nothing while the lock is held.
func TestCheckSeesCloseWithoutKeeper(t *testing.T) {
	adm := newAdmin(t)
	d := newDriver(t, pglock.Options{Keepalive: time.Hour})
	pglock.NoKeeper(d, true)
	locktest.DriverKill{Driver: d, Requests: kindRequests("peek/" + randomHex(4)), Kill: adm.terminator(d)}.CheckSeesKill(t)
}

// alive reports whether pid is a backend of the server.
func (a *admin) alive(t testing.TB, pid uint32) bool {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	var n int
	if err := a.c.QueryRow(context.Background(), "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", int32(pid)).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n > 0
}

// TestWatchSurvivesQueries: the watch pauses for every query on the held
// connection (Refresh, keep-alive pings) without taking bytes from pgx,
// and still sees a later termination at once.
func TestWatchSurvivesQueries(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm := newAdmin(t)
	d := newDriver(t, pglock.Options{Keepalive: MinKeepaliveForTest})
	r := driver.Request{Name: "watch/q/" + randomHex(4), Owner: randomHex(16)}
	g, err := d.TryLock(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	lost := locktest.LostCh(g)
	deadline := time.Now().Add(300 * time.Millisecond) // pings every 10ms meanwhile
	for time.Now().Before(deadline) {
		if _, err := d.Refresh(ctx, r); err != nil {
			t.Fatalf("Refresh: %v", err)
		}
		if err := g.Check(time.Now()); err != nil {
			t.Fatalf("Check: %v", err)
		}
	}
	killed := adm.terminateNow(t, pglock.HolderPID(d, r.Owner))
	select {
	case <-lost:
		t.Logf("loss signalled %v after pg_terminate_backend", time.Since(killed))
	case <-time.After(time.Second):
		t.Fatal("loss not signalled 1s after pg_terminate_backend")
	}
}

// MinKeepaliveForTest is the keep-alive interval of TestWatchSurvivesQueries.
const MinKeepaliveForTest = pglock.MinKeepalive

// TestQueriesLookFirst: a query on a held connection (the keeper's
// keep-alive ping, Refresh's check, Unlock's unlock) is only sent after a
// look at the socket found the server still there. A Check skips the
// socket while a query runs on it, so a holder resumed after a pause,
// whose keep-alive ping falls due at once, would otherwise have its
// Checks say "held" until a ping on a connection already closed failed.
// Here the session is terminated and gone before the query falls due,
// with nothing else looking (a keeper on its timer alone, or none): the
// loss must come from the look, with no query sent ("the server closed
// the connection"), not from a failed query.
func TestQueriesLookFirst(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	adm := newAdmin(t)
	const byLook = "the server closed the connection holding the lock"
	for _, path := range []string{"keep-alive", "refresh", "unlock"} {
		t.Run(path, func(t *testing.T) {
			var d *pglock.Driver
			if path == "keep-alive" {
				// A ping every 200ms, on the timer alone: only the keeper
				// can find the loss, and only on its way to a ping.
				d = newDriver(t, pglock.Options{Keepalive: 200 * time.Millisecond})
				pglock.TimerKeeper(d, true)
			} else {
				d = newDriver(t, pglock.Options{Keepalive: time.Hour})
				pglock.NoKeeper(d, true)
			}
			for kind, r := range kindRequests("lookfirst/" + path + "/" + randomHex(4)) {
				g, err := d.TryLock(ctx, r)
				if err != nil {
					t.Fatal(err)
				}
				lost := locktest.LostCh(g)
				pid := pglock.HolderPID(d, r.Owner)
				adm.terminateNow(t, pid)
				if !waitUntil(5*time.Second, func() bool { return !adm.alive(t, pid) }) {
					t.Fatalf("%s: backend %d still alive", kind, pid)
				}
				var got error
				switch path {
				case "keep-alive":
					select {
					case <-lost:
					case <-time.After(5 * time.Second):
						t.Fatalf("%s: loss not signalled 5s after the termination", kind)
					}
					got = g.Check(time.Now())
				case "refresh":
					_, got = d.Refresh(ctx, r)
					if !errors.Is(got, driver.ErrNotHeld) {
						t.Errorf("%s: Refresh = %v, want ErrNotHeld", kind, got)
					}
				case "unlock":
					got = d.Unlock(ctx, r)
					if !errors.Is(got, driver.ErrNotHeld) {
						t.Errorf("%s: Unlock = %v, want ErrNotHeld", kind, got)
					}
				}
				if got == nil || !strings.Contains(got.Error(), byLook) {
					t.Errorf("%s: the loss = %v; want it found by the look before the query (%q)", kind, got, byLook)
				}
				select {
				case <-lost:
				case <-time.After(2 * time.Second):
					if path != "unlock" {
						t.Errorf("%s: loss not signalled", kind)
					}
				}
			}
		})
	}
}

// TestTerminateEndsLease: a lease, as a user holds it, ends after
// pg_terminate_backend of its session, in each of 20 runs, by the watch on
// the socket: with a keep-alive interval and a TTL of an hour no ping or
// renewal falls due, so only the socket can explain the end within
// ServerKill's hang bound of 2s.
func TestTerminateEndsLease(t *testing.T) {
	adm := newAdmin(t)
	d := newDriver(t, pglock.Options{Keepalive: time.Hour, MaxIdle: 1})
	l, err := dlock.New(d, dlock.WithTTL(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	locktest.ServerKill(t, l, "watch/lease-"+randomHex(4), 20, 2*time.Second,
		func(t *testing.T, lease *dlock.Lease) time.Time {
			return adm.terminateNow(t, pglock.HolderPID(d, lease.Owner()))
		})
}
