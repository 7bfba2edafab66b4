package filelock_test

import (
	"bufio"
	"errors"
	"os/exec"
	"testing"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/locktest"
)

// TestFlockCommand: util-linux flock(1) on a lock file excludes dlock, and
// a dlock waiter gets the lock as soon as the command exits.
func TestFlockCommand(t *testing.T) {
	bin, err := exec.LookPath("flock")
	if err != nil {
		t.Fatalf("flock(1) not found (%v): install util-linux, as %s does", err, testenv.ServicesScript)
	}
	ctx := locktest.Context(t, 30*time.Second)
	dir := t.TempDir()
	l, _ := newLocker(t, dir)
	_ = mustTry(t, ctx, l, "shell/job").Release(ctx) // create the file

	cmd := exec.Command(bin, lockPath(t, dir, "shell/job"), "-c", "echo held; read line")
	out, _ := cmd.StdoutPipe()
	in, _ := cmd.StdinPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "held\n" {
		t.Fatalf("flock(1) said %q, %v", line, err)
	}
	if _, err := l.TryAcquire(ctx, "shell/job"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryAcquire while flock(1) holds the file = %v, want ErrNotAcquired", err)
	}
	got := acquireAsync(t, func() (*dlock.Lease, error) { return l.Acquire(ctx, "shell/job") })
	time.Sleep(50 * time.Millisecond)
	select {
	case <-got:
		t.Fatal("Acquire returned while flock(1) held the file")
	default:
	}
	released := time.Now()
	_ = in.Close() // the command's read ends, and it exits
	lease := <-got
	if lease == nil {
		t.FailNow()
	}
	t.Logf("acquired %v after flock(1) was told to exit", time.Since(released))
	_ = lease.Release(ctx)
}
