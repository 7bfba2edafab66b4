package pglock_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/locktest"
	"github.com/dlockgo/dlock/pglock"
)

// TestTerminateBackend: an operator ends the holder's session with
// pg_terminate_backend. The lease reports the loss (within a hang bound of
// 10× a keep-alive interval and a check's timeout), and another client
// gets the lock (at once: the server freed it with the session).
func TestTerminateBackend(t *testing.T) {
	ctx := testContext(t, 30*time.Second)
	const keepalive = 200 * time.Millisecond
	adm := newAdmin(t)
	a := newLocker(t, pglock.Options{Keepalive: keepalive})
	b := newLocker(t, pglock.Options{})
	name := "terminate/" + randomHex(4)

	lease, err := a.Acquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if !lease.Expires().IsZero() {
		t.Errorf("Expires() = %v, want zero: a session lock does not expire", lease.Expires())
	}
	holders, _ := adm.lockRows(t, table, name)
	pid := pglock.HolderPID(a.Driver().(*pglock.Driver), lease.Owner())
	if len(holders) != 1 || holders[0] != pid {
		t.Fatalf("pg_locks holders of %q = %v, want the lease's session %d", name, holders, pid)
	}
	work, stop := lease.Context(ctx)
	defer stop()

	adm.terminate(t, table, name)
	terminated := time.Now()
	other, err := b.TryAcquire(ctx, name)
	if err != nil {
		t.Fatalf("TryAcquire right after the holder's session was terminated: %v", err)
	}
	defer other.Release(ctx)
	if other.Token() <= lease.Token() {
		t.Errorf("new holder's token %d is not greater than the terminated holder's %d", other.Token(), lease.Token())
	}

	bound := 10 * (keepalive + time.Second) // a hang bound: 10× an interval and a check's timeout
	select {
	case <-lease.Done():
		t.Logf("Done closed %v after pg_terminate_backend (keep-alive %v)", time.Since(terminated), keepalive)
	case <-time.After(bound):
		t.Fatalf("Done not closed %v after pg_terminate_backend", bound)
	}
	if !errors.Is(lease.Err(), dlock.ErrLost) {
		t.Errorf("Err() = %v, want ErrLost", lease.Err())
	}
	<-work.Done()
	if err := lease.Release(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Release after the loss = %v, want ErrNotHeld", err)
	}
}

// TestRenew: Renew finds the lock in pg_locks while it is held, and
// reports it gone once its session was terminated.
func TestRenew(t *testing.T) {
	ctx := testContext(t, 30*time.Second)
	adm := newAdmin(t)
	// A long keep-alive interval: the loss must be found by Renew itself.
	l := newLocker(t, pglock.Options{Keepalive: time.Hour}, dlock.WithTTL(time.Hour))
	name := "renew/" + randomHex(4)
	lease, err := l.Acquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := lease.Renew(ctx); err != nil {
			t.Fatalf("Renew of a held lock: %v", err)
		}
	}
	adm.terminate(t, table, name)
	err = lease.Renew(ctx)
	if !errors.Is(err, dlock.ErrNotHeld) || !errors.Is(err, dlock.ErrLost) {
		t.Errorf("Renew after pg_terminate_backend = %v, want ErrNotHeld and ErrLost", err)
	}
	select {
	case <-lease.Done():
	case <-time.After(time.Second):
		t.Error("Done not closed after Renew found the lock gone")
	}
}

// TestKilledProcesses: a process killed with SIGKILL while it holds a lock,
// or while it waits for one, leaves nothing on the server: the holder's
// lock is free at once (its kernel closes the connection, which the idle
// session reads), and the waiter's request leaves the queue, found by the
// client_connection_check_interval the driver sets (the keep-alive
// interval, 1s here; the test waits 15s). Nothing cancels anything for them: the processes
// are gone.
func TestKilledProcesses(t *testing.T) {
	ctx := testContext(t, 60*time.Second)
	adm := newAdmin(t)
	name := "killed/" + randomHex(4)

	holder := startHelper(t, "hold", name)
	waiter := startHelper(t, "wait", name)
	if !waitUntil(10*time.Second, func() bool { _, w := adm.lockRows(t, table, name); return w == 1 }) {
		t.Fatal("the waiting process never showed in pg_locks")
	}
	holders, _ := adm.lockRows(t, table, name)
	if len(holders) != 1 {
		t.Fatalf("holders %v, want the holding process's session", holders)
	}

	// Kill the waiter: its request must leave the queue.
	_ = waiter.Process.Kill()
	_ = waiter.Wait()
	killed := time.Now()
	if !waitUntil(15*time.Second, func() bool { _, w := adm.lockRows(t, table, name); return w == 0 }) {
		t.Fatal("the killed waiter's request was still queued 15s after it died")
	}
	t.Logf("the killed waiter's request left the queue %v after the kill", time.Since(killed))

	// Kill the holder: the lock is free at once.
	l := newLocker(t, pglock.Options{})
	_ = holder.Process.Kill()
	_ = holder.Wait()
	killed = time.Now()
	lease, err := l.Acquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("acquired %v after the holder was killed", time.Since(killed))
	_ = lease.Release(ctx)
}

// startHelper runs this test binary as a process that holds ("hold") or
// waits for ("wait") the lock called name, and returns once it is holding
// or has started waiting. The test kills it.
func startHelper(t *testing.T, role, name string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), "PGLOCK_HELPER="+role, "PGLOCK_HELPER_NAME="+name, "PGLOCK_HELPER_TABLE="+table)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != role {
		t.Fatalf("helper %s: %q, %v", role, line, err)
	}
	return cmd
}

// TestHelperProcess is the body of the processes startHelper runs; on its
// own it does nothing.
func TestHelperProcess(t *testing.T) {
	role := os.Getenv("PGLOCK_HELPER")
	if role == "" {
		return
	}
	ctx := context.Background()
	o := &pglock.Options{Table: os.Getenv("PGLOCK_HELPER_TABLE"), Keepalive: time.Second}
	l, err := pglock.New(ctx, config(t), o)
	if err != nil {
		t.Fatal(err)
	}
	name := os.Getenv("PGLOCK_HELPER_NAME")
	if role == "hold" {
		if _, err := l.Acquire(ctx, name); err != nil {
			t.Fatal(err)
		}
		fmt.Println(role)
	} else {
		fmt.Println(role)
		_, _ = l.Acquire(ctx, name)
	}
	select {} // until killed
}

// TestReleaseDoesNotWaitPastItsContext: a release that cannot get the
// holding connection (a keep-alive check stuck on a silent server) returns
// when its context ends, and the lock is freed once the connection is
// free again (the driver closes it).
func TestReleaseDoesNotWaitPastItsContext(t *testing.T) {
	ctx := testContext(t, 30*time.Second)
	adm := newAdmin(t)
	d := newDriver(t, pglock.Options{})
	l, err := dlock.New(d)
	if err != nil {
		t.Fatal(err)
	}
	name := "release-ctx/" + randomHex(4)
	lease, err := l.Acquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	free := pglock.Occupy(d, lease.Owner())
	rctx, rcancel := context.WithTimeout(ctx, 200*time.Millisecond)
	start := time.Now()
	err = lease.Release(rctx)
	rcancel()
	if took := time.Since(start); err == nil || took > 2*time.Second { // a hang bound, 10× the deadline
		t.Fatalf("Release with the connection occupied = %v after %v, want an error at its 200ms deadline", err, took)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Release = %v, want an error matching DeadlineExceeded", err)
	}
	if h, _ := adm.lockRows(t, table, name); len(h) != 1 {
		t.Fatalf("holders %v while the connection is occupied, want 1", h)
	}
	free()
	if !waitUntil(5*time.Second, func() bool { h, _ := adm.lockRows(t, table, name); return len(h) == 0 }) {
		t.Error("the lock is still held 5s after the connection was freed")
	}
}

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

// TestFatalReadWithReply: a backend terminated while a query of its
// session was in flight sends the query's reply, then its FATAL, then
// lets the lock go and closes; here both frames come in one segment and
// the close comes late (a proxy holds them, then delivers the frames and
// keeps the FIN). pgx reads both with the reply and stops at the reply's
// end, leaving the FATAL unparsed in its buffer, with nothing left in the
// socket and the connection still established: the query (Renew's check)
// must not report the lock held, and the look after it must find the
// loss, from the frame as pgx read it.
func TestFatalReadWithReply(t *testing.T) {
	ctx := testContext(t, 30*time.Second)
	adm := newAdmin(t)
	cfg := config(t)
	px := testenv.StartProxy(t, net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))))
	host, port, err := net.SplitHostPort(px.Addr)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Host, cfg.Fallbacks = host, nil
	if p, err := strconv.Atoi(port); err != nil {
		t.Fatal(err)
	} else {
		cfg.Port = uint16(p)
	}
	d, err := pglock.NewDriver(ctx, cfg, &pglock.Options{Table: table, Keepalive: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	pglock.NoKeeper(d, true)

	r := driver.Request{Name: "fatal/" + randomHex(4), Owner: randomHex(16)}
	g, err := d.TryLock(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	pid := pglock.HolderPID(d, r.Owner)
	// A first Renew prepares its statement: the next is one round trip.
	if _, err := d.Renew(ctx, r); err != nil {
		t.Fatal(err)
	}
	px.Hold()
	renewed := make(chan error, 1)
	go func() { _, err := d.Renew(ctx, r); renewed <- err }()
	readyForQuery := []byte("Z\x00\x00\x00\x05")
	if !px.WaitHeld(10*time.Second, func(b []byte) bool { return bytes.HasSuffix(b[:max(len(b)-1, 0)], readyForQuery) }) {
		t.Fatal("no reply to Renew's query within 10s")
	}
	adm.terminateNow(t, pid)
	if !waitUntil(5*time.Second, func() bool { return !adm.alive(t, pid) }) {
		t.Fatalf("backend %d still alive 5s after pg_terminate_backend", pid)
	}
	if !px.WaitClosed(5*time.Second, 1) {
		t.Fatal("the terminated backend's connection did not end within 5s")
	}
	px.Deliver()
	select {
	case err := <-renewed:
		// Its reply said held, but came with the FATAL: the lock is gone.
		if !errors.Is(err, driver.ErrNotHeld) {
			t.Fatalf("Renew whose reply came with the FATAL = %v, want ErrNotHeld", err)
		}
	case <-ctx.Done():
		t.Fatal("Renew did not return")
	}
	if err := g.Check(time.Now()); err == nil {
		t.Fatal("Check after the FATAL was read with the reply found the lock held")
	}
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
// connection (Renew, keep-alive pings) without taking bytes from pgx,
// and still sees a later termination at once.
func TestWatchSurvivesQueries(t *testing.T) {
	ctx := testContext(t, 30*time.Second)
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
		if _, err := d.Renew(ctx, r); err != nil {
			t.Fatalf("Renew: %v", err)
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
// keep-alive ping, Renew's check, Unlock's unlock) is only sent after a
// look at the socket found the server still there. A Check skips the
// socket while a query runs on it, so a holder resumed after a pause,
// whose keep-alive ping falls due at once, would otherwise have its
// Checks say "held" until a ping on a connection already closed failed.
// Here the session is terminated and gone before the query falls due,
// with nothing else looking (a keeper on its timer alone, or none): the
// loss must come from the look, with no query sent ("the server closed
// the connection"), not from a failed query.
func TestQueriesLookFirst(t *testing.T) {
	ctx := testContext(t, 60*time.Second)
	adm := newAdmin(t)
	const byLook = "the server closed the connection holding the lock"
	for _, path := range []string{"keep-alive", "renew", "unlock"} {
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
				case "renew":
					_, got = d.Renew(ctx, r)
					if !errors.Is(got, driver.ErrNotHeld) {
						t.Errorf("%s: Renew = %v, want ErrNotHeld", kind, got)
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
