package pglock_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/pglock"
)

// TestTerminateBackend: an operator ends the holder's session with
// pg_terminate_backend. The lease reports the loss (within a hang bound of
// 10× a keep-alive interval and a check's timeout), and another client
// gets the lock (at once: the server freed it with the session).
func TestTerminateBackend(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
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

// TestRefresh: Refresh finds the lock in pg_locks while it is held, and
// reports it gone once its session was terminated.
func TestRefresh(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm := newAdmin(t)
	// A long keep-alive interval: the loss must be found by Refresh itself.
	l := newLocker(t, pglock.Options{Keepalive: time.Hour}, dlock.WithTTL(time.Hour))
	name := "refresh/" + randomHex(4)
	lease, err := l.Acquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := lease.Refresh(ctx); err != nil {
			t.Fatalf("Refresh of a held lock: %v", err)
		}
	}
	adm.terminate(t, table, name)
	err = lease.Refresh(ctx)
	if !errors.Is(err, dlock.ErrNotHeld) || !errors.Is(err, dlock.ErrLost) {
		t.Errorf("Refresh after pg_terminate_backend = %v, want ErrNotHeld and ErrLost", err)
	}
	select {
	case <-lease.Done():
	case <-time.After(time.Second):
		t.Error("Done not closed after Refresh found the lock gone")
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
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
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
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
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
