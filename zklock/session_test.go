package zklock_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/locktest"
	"github.com/dlockgo/dlock/zklock"
)

// TestCrashedHolder: a holder whose process dies (connection gone, session
// neither closed nor renewed) keeps the lock until the ensemble expires its
// session, which it cannot do sooner than the session timeout after it
// last heard from the holder; then a waiter gets it. The holder's driver
// declares the lock lost before that.
func TestCrashedHolder(t *testing.T) {
	f := newFixture(t, 30*time.Second)
	ctx := f.ctx
	const timeout = 2 * time.Second
	_, a, da, b := f.pair(timeout, false)
	lease := locktest.Must(t)(a.Acquire(ctx, "crash"))
	got := make(chan *dlock.Lease, 1)
	go func() {
		l, err := b.Acquire(ctx, "crash")
		if err != nil {
			t.Errorf("waiter: %v", err)
			close(got)
			return
		}
		got <- l
	}()
	time.Sleep(300 * time.Millisecond) // the waiter queues
	da.Crash()
	crashed := time.Now()
	_, granted, heard := da.SessionInfo()
	if granted != timeout {
		t.Errorf("granted session timeout %v, want %v", granted, timeout)
	}
	var lostAt time.Time
	lostc := make(chan time.Time, 1)
	go func() {
		<-lease.Done()
		lostc <- time.Now()
	}()
	other := <-got
	if other == nil {
		return
	}
	acquired := time.Now()
	select { // the lease's state, not the goroutine's report of it
	case <-lease.Done():
	default:
		t.Fatal("the waiter got the lock before the crashed holder's lease was declared lost")
	}
	lostAt = <-lostc
	t.Logf("crashed holder: lease lost %v after the crash (%v after the ensemble last heard from it); waiter acquired %v after the crash (%v after)",
		lostAt.Sub(crashed).Round(time.Millisecond), lostAt.Sub(heard).Round(time.Millisecond),
		acquired.Sub(crashed).Round(time.Millisecond), acquired.Sub(heard).Round(time.Millisecond))
	if d := acquired.Sub(heard); d < timeout {
		t.Errorf("the waiter acquired %v after the ensemble last heard from the holder, before the session timeout %v", d, timeout)
	}
	if d := acquired.Sub(crashed); d > 10*timeout { // a hang bound: the waiter's ctx ends at 30s
		t.Errorf("the waiter acquired only %v after the crash (session timeout %v)", d, timeout)
	}
	if !errors.Is(lease.Err(), dlock.ErrLost) {
		t.Errorf("crashed holder's Err() = %v, want ErrLost", lease.Err())
	}
	if other.Token() <= lease.Token() {
		t.Errorf("token %d after the crash is not above the crashed holder's %d", other.Token(), lease.Token())
	}
	_ = other.Release(ctx)
}

// TestShortConnectionLossKeepsLock: a connection loss shorter than the
// session timeout keeps the session and the lock.
func TestShortConnectionLossKeepsLock(t *testing.T) {
	f := newFixture(t, 60*time.Second)
	ctx := f.ctx
	const timeout = 5 * time.Second
	p, a, da, b := f.pair(timeout, true)
	lease := locktest.Must(t)(a.Acquire(ctx, "short"))
	id, _, _ := da.SessionInfo()
	p.Cut()
	time.Sleep(500 * time.Millisecond)
	if lease.Err() != nil {
		t.Fatalf("lease ended during a short connection loss: %v", lease.Err())
	}
	p.Restore()
	// Once reconnected, the session is the same and the lock still held.
	// The wait for a fresh reply is a hang bound: a reconnection after the
	// session timeout shows as a new session and a lost lease below.
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, _, heard := da.SessionInfo()
		if time.Since(heard) < 200*time.Millisecond {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the driver did not reconnect")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if id2, _, _ := da.SessionInfo(); id2 != id {
		t.Errorf("session %x after the connection loss, want the same %x", id2, id)
	}
	if lease.Err() != nil {
		t.Fatalf("lease ended across a short connection loss: %v", lease.Err())
	}
	if _, err := b.TryAcquire(ctx, "short"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("TryAcquire by another client after the short loss = %v, want ErrNotAcquired", err)
	}
	if err := lease.Renew(ctx); err != nil {
		t.Errorf("Renew after the short loss: %v", err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Errorf("Release after the short loss: %v", err)
	}
}

// TestReconnectResendsWatches: connection drops, while a waiter's watch is
// set, a lock is held and requests are in flight, keep the session, the
// held lock (the watch on its node is set again from the newest zxid, so
// the server reports no change that came before) and the waiter's watch:
// after 20 drops the release still reaches the waiter. Under -race it also
// checks that the zk.Conn's own zxid field, which go-zookeeper v1.0.4
// reads and writes with no lock on a reconnection, is left alone (see
// trackedConn.withZxid).
func TestReconnectResendsWatches(t *testing.T) {
	f := newFixture(t, 60*time.Second)
	ctx := f.ctx
	const timeout = 10 * time.Second
	_, a, da, b := f.pair(timeout, false)
	held := locktest.Must(t)(b.Acquire(ctx, "resend"))
	got := make(chan error, 1)
	go func() {
		l, err := a.Acquire(ctx, "resend")
		if err == nil {
			err = l.Release(ctx)
		}
		got <- err
	}()
	for da.Waiting() == 0 {
		if ctx.Err() != nil {
			t.Fatal("the waiter did not set its watch")
		}
		time.Sleep(5 * time.Millisecond)
	}
	mine := locktest.Must(t)(a.Acquire(ctx, "resend-mine"))
	time.Sleep(100 * time.Millisecond) // past the 25ms after which its node is watched
	id, _, _ := da.SessionInfo()
	if da.Zxid() <= 0 {
		t.Fatalf("zxid %d after the first requests, want the server's", da.Zxid())
	}

	// Requests on a's session throughout, so that some are queued when
	// each new connection starts and their replies come in at once.
	stop := make(chan struct{})
	var busy sync.WaitGroup
	for i := range 4 {
		busy.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if l, err := a.TryAcquire(ctx, fmt.Sprint("busy-", i)); err == nil {
					_ = l.Release(ctx)
				}
			}
		})
	}
	for i := 0; i < 20; i++ {
		dropped := time.Now()
		da.Drop()
		for {
			if _, _, heard := da.SessionInfo(); heard.After(dropped) {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("no reply on a new connection after drop %d", i+1)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	close(stop)
	busy.Wait()

	if id2, _, _ := da.SessionInfo(); id2 != id {
		t.Fatalf("session %x after the drops, want the same %x", id2, id)
	}
	select {
	case err := <-got:
		t.Fatalf("the waiter returned before the release: %v", err)
	default:
	}
	if err := mine.Err(); err != nil {
		t.Fatalf("the lock held across the drops: %v", err)
	}
	if err := mine.Release(ctx); err != nil {
		t.Fatalf("the lock held across the drops: Release: %v", err)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("the waiter, after the release: %v", err)
	}
}

// TestReconnectSendsZxid: the handshake of a reconnection carries the
// newest zxid the session saw, so that it reconnects only to a server that
// has seen as much: with a zxid beyond the server's, the server refuses the
// session; with the true one, it takes it back, lock and all.
func TestReconnectSendsZxid(t *testing.T) {
	ctx := locktest.Context(t, 60*time.Second)
	servers := []string{testenv.ZKAddr(t)}
	const timeout = 20 * time.Second
	a, da := newLocker(t, servers, testPrefix(), timeout)
	lease := locktest.Must(t)(a.Acquire(ctx, "zxid"))
	seen := da.Zxid()
	if seen <= 0 {
		t.Fatalf("zxid %d after the acquisition, want the server's", seen)
	}
	da.SetZxid(seen + 1<<40)
	dropped := time.Now()
	da.Drop()
	// Refused: no reply on a new connection for 3s (the zk.Conn retries
	// about every second).
	time.Sleep(3 * time.Second)
	if _, _, heard := da.SessionInfo(); heard.After(dropped) {
		t.Fatal("a server took the session back although its handshake said it had seen a zxid beyond the server's")
	}
	da.SetZxid(seen)
	for {
		if _, _, heard := da.SessionInfo(); heard.After(dropped) {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the session did not come back with its true zxid")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := lease.Err(); err != nil {
		t.Fatalf("the lock after the refused reconnections: %v", err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestLongConnectionLossLosesLock: a connection loss longer than the
// session timeout loses the lock; the holder learns of it before another
// client gets the lock. Once the connection is back, the driver works
// again on a new session.
func TestLongConnectionLossLosesLock(t *testing.T) {
	f := newFixture(t, 30*time.Second)
	ctx := f.ctx
	const timeout = 2 * time.Second
	p, a, da, b := f.pair(timeout, true)
	lease := locktest.Must(t)(a.Acquire(ctx, "long"))
	id, _, _ := da.SessionInfo()
	got := make(chan *dlock.Lease, 1)
	lostFirst := make(chan bool, 1) // whether the holder's Done was closed when the waiter got the lock
	go func() {
		l, err := b.Acquire(ctx, "long")
		if err != nil {
			t.Errorf("waiter: %v", err)
			close(got)
			return
		}
		select {
		case <-lease.Done():
			lostFirst <- true
		default:
			lostFirst <- false
		}
		got <- l
	}()
	time.Sleep(200 * time.Millisecond)
	p.Cut()
	cut := time.Now()
	select {
	case <-lease.Done():
	case <-time.After(10 * timeout): // a hang bound; the order below is the property
		t.Fatalf("lease not lost %v into a connection loss (session timeout %v)", time.Since(cut), timeout)
	}
	lost := time.Since(cut)
	other := <-got
	if other == nil {
		return
	}
	taken := time.Since(cut)
	t.Logf("connection cut: lease lost after %v, lock taken by another client after %v", lost.Round(time.Millisecond), taken.Round(time.Millisecond))
	if !<-lostFirst {
		t.Errorf("the holder learned of the loss after another client got the lock")
	}
	if !errors.Is(lease.Err(), dlock.ErrLost) {
		t.Errorf("Err() = %v, want ErrLost", lease.Err())
	}
	if err := lease.Release(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Release of the lost lease = %v, want ErrNotHeld", err)
	}
	_ = other.Release(ctx)

	p.Restore()
	again, err := a.Acquire(ctx, "long")
	if err != nil {
		t.Fatalf("Acquire once the connection is back: %v", err)
	}
	if id2, _, _ := da.SessionInfo(); id2 == id {
		t.Error("the driver kept using the session it gave up on")
	}
	_ = again.Release(ctx)
}

// TestWaiterRidesOutConnectionLoss: a waiting Acquire whose session the
// driver gives up on behind a cut connection, and whose new session finds
// no server for a while, goes on waiting until its context ends: once the
// connection is back it queues again and gets the lock when the holder
// releases it.
func TestWaiterRidesOutConnectionLoss(t *testing.T) {
	f := newFixture(t, 30*time.Second)
	ctx := f.ctx
	const timeout = time.Second
	p, a, da, b := f.pair(timeout, true)
	held := locktest.Must(t)(b.Acquire(ctx, "ride"))
	id, _, _ := da.SessionInfo()
	got := make(chan error, 1)
	go func() {
		l, err := a.Acquire(ctx, "ride")
		if err == nil {
			err = l.Release(ctx)
		}
		got <- err
	}()
	time.Sleep(200 * time.Millisecond)
	p.Cut()
	time.Sleep(3 * timeout) // the first session is given up; a new one finds no server
	select {
	case err := <-got:
		t.Fatalf("the waiter gave up %v into the connection loss: %v", 3*timeout, err)
	default:
	}
	p.Restore()
	time.Sleep(timeout) // the new session connects and queues
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("the waiter, after the connection came back: %v", err)
	}
	if id2, _, _ := da.SessionInfo(); id2 == id {
		t.Error("the waiter's driver kept the session it gave up on")
	}
}

// TestReleaseDuringConnectionLoss: a release while the connection is lost
// does not leave the node behind: the delete goes through once the client
// reconnects (within the session timeout), whether Release waited for it or
// its context ended first.
func TestReleaseDuringConnectionLoss(t *testing.T) {
	f := newFixture(t, 60*time.Second)
	ctx, prefix, adm := f.ctx, f.prefix, f.adm
	const timeout = 6 * time.Second
	p, a, da, b := f.pair(timeout, true)

	for _, patient := range []bool{true, false} {
		lease := locktest.Must(t)(a.Acquire(ctx, "release"))
		id, _, _ := da.SessionInfo()
		p.Cut()
		released := make(chan error, 1)
		go func() {
			rctx := ctx
			if !patient {
				var rcancel context.CancelFunc
				rctx, rcancel = context.WithTimeout(ctx, 200*time.Millisecond)
				defer rcancel()
			}
			released <- lease.Release(rctx)
		}()
		time.Sleep(time.Second)
		p.Restore()
		restored := time.Now()
		err := <-released
		switch {
		case patient && err != nil:
			t.Errorf("Release waiting through the connection loss: %v", err)
		case !patient && !errors.Is(err, context.DeadlineExceeded):
			t.Errorf("Release with a deadline during the connection loss = %v, want DeadlineExceeded", err)
		}
		adm.waitLocks(prefix, "release", 0, 30*time.Second) // a hang bound; a session expiry shows below
		t.Logf("patient=%v: node removed %v after the connection came back", patient, time.Since(restored).Round(time.Millisecond))
		if id2, _, _ := da.SessionInfo(); id2 != id {
			t.Errorf("the session changed (%x to %x): the node went with the session, not with the release", id, id2)
		}
		other, err := b.TryAcquire(ctx, "release")
		if err != nil {
			t.Fatalf("TryAcquire after the release: %v", err)
		}
		_ = other.Release(ctx)
	}
}

// TestKilledProcess: a holder process killed with SIGKILL keeps its lock
// until the ensemble expires its session (once the process is reaped and
// its connection closed, the lock is still held); then a waiter gets it
// (a hang bound of the test's 60s, 15× the session timeout).
func TestKilledProcess(t *testing.T) {
	ctx := locktest.Context(t, 60*time.Second)
	addr := testenv.ZKAddr(t)
	prefix := testPrefix()
	const timeout = 4 * time.Second
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperHolder$", "-test.count=1")
	cmd.Env = append(os.Environ(), "DLOCK_ZK_HELPER="+addr+" "+prefix+" "+timeout.String())
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	var token uint64
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if _, err := fmt.Sscanf(sc.Text(), "HELD %d", &token); err == nil {
			break
		}
	}
	if token == 0 {
		t.Fatal("the helper process did not take the lock")
	}
	b, _ := newLocker(t, []string{addr}, prefix, timeout)
	if _, err := b.TryAcquire(ctx, "killed"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryAcquire while the helper holds the lock = %v", err)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	_, _ = cmd.Process.Wait() // reaped: its connection to the server is closed
	// The ensemble last heard from the helper at most a ping interval (a
	// third of the timeout) before the kill: its session, and the lock,
	// outlive the closed connection.
	if l, err := b.TryAcquire(ctx, "killed"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("TryAcquire once the killed holder was reaped (%v after the kill) = %v, want ErrNotAcquired: the lock went with the connection, not the session",
			time.Since(killed).Round(time.Millisecond), err)
		if err == nil {
			_ = l.Release(ctx)
		}
	}
	lease := locktest.Must(t)(b.Acquire(ctx, "killed"))
	t.Logf("lock of a killed process taken %v after the kill (session timeout %v)", time.Since(killed).Round(time.Millisecond), timeout)
	if lease.Token() <= token {
		t.Errorf("token %d is not above the killed holder's %d", lease.Token(), token)
	}
	_ = lease.Release(ctx)
}

// TestHelperHolder is the holder process of TestKilledProcess: it takes
// the lock, says so, and waits to be killed.
func TestHelperHolder(t *testing.T) {
	env := os.Getenv("DLOCK_ZK_HELPER")
	if env == "" {
		return
	}
	f := strings.Fields(env)
	timeout, _ := time.ParseDuration(f[2])
	l, err := zklock.New([]string{f[0]}, &zklock.Options{Prefix: f[1], SessionTimeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	lease, err := l.Acquire(context.Background(), "killed")
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("HELD %d\n", lease.Token())
	time.Sleep(time.Minute)
}
