package main

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/dlockgo/dlock/internal/testenv"
)

// waitFor waits up to d for path to exist.
func waitFor(t *testing.T, path string, d time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(d); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not appear within %v", path, d)
		}
	}
}

// absent fails t if path exists.
func absent(t *testing.T, path, what string) {
	t.Helper()
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("%s (stat %s: %v)", what, path, err)
	}
}

// exitsZero waits up to 15s for a process's Wait error, which must be nil.
func exitsZero(t *testing.T, done <-chan error, what string) {
	t.Helper()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("%s did not exit within 15s", what)
	}
}

// TestRunExcludesEtcdctl: with --backend etcd://…?layout=concurrency (no
// prefix), `dlock run NAME` and `etcdctl lock NAME` are one lock: while
// etcdctl lock runs its command, dlock run --no-wait (and --wait 500ms)
// exits busy without running its own, and runs it once etcdctl is done;
// while dlock run runs its command, etcdctl lock waits, and runs its own
// once dlock run has released.
func TestRunExcludesEtcdctl(t *testing.T) {
	eps := testenv.EtcdEndpoints(t)
	backend := "etcd://" + eps[0] + "?layout=concurrency"
	c := newCLI(t)
	dir := t.TempDir()
	name := uniqueName(t, "etcdctl")
	file := func(n string) string { return filepath.Join(dir, n) }
	const holdUntil = `touch "$1"; while [ ! -e "$2" ]; do sleep 0.02; done`

	ctl := testenv.Etcdctl(t, eps, "lock", name, "--", "sh", "-c", holdUntil, "sh", file("ctl-in"), file("ctl-out"))
	if err := ctl.Start(); err != nil {
		t.Fatal(err)
	}
	ctlDone := make(chan error, 1)
	go func() { ctlDone <- ctl.Wait() }()
	waitFor(t, file("ctl-in"), 15*time.Second)
	for _, wait := range [][]string{{"--no-wait"}, {"--wait", "500ms"}} {
		args := append(append([]string{"run", "--backend", backend}, wait...), name, "--", "touch", file("ran"))
		if r := c.run(args...); r.code != exitBusy {
			t.Fatalf("dlock run %s while etcdctl lock holds: exit %d, want busy %d; stderr %s", wait[0], r.code, exitBusy, r.stderr)
		}
		absent(t, file("ran"), "dlock run ran its command while etcdctl lock held "+name)
	}
	if err := os.WriteFile(file("ctl-out"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	exitsZero(t, ctlDone, "etcdctl lock, once its command ended")
	if r := c.run("run", "--no-wait", "--backend", backend, name, "--", "touch", file("ran")); r.code != 0 {
		t.Fatalf("dlock run --no-wait once etcdctl released: exit %d; stderr %s", r.code, r.stderr)
	}
	waitFor(t, file("ran"), time.Second)

	run := c.start("run", "--backend", backend, name, "--", "sh", "-c", holdUntil, "sh", file("run-in"), file("run-out"))
	waitFor(t, file("run-in"), 15*time.Second)
	ctl2 := testenv.Etcdctl(t, eps, "lock", name, "--", "touch", file("ctl-ran"))
	if err := ctl2.Start(); err != nil {
		t.Fatal(err)
	}
	ctl2Done := make(chan error, 1)
	go func() { ctl2Done <- ctl2.Wait() }()
	time.Sleep(time.Second)
	absent(t, file("ctl-ran"), "etcdctl lock ran its command while dlock run held "+name)
	select {
	case err := <-ctl2Done:
		t.Fatalf("etcdctl lock exited (%v) while dlock run held %s", err, name)
	default:
	}
	if err := os.WriteFile(file("run-out"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if code := run.wait(15 * time.Second); code != 0 {
		t.Fatalf("dlock run exited %d; stderr %s", code, run.stderr)
	}
	waitFor(t, file("ctl-ran"), 15*time.Second)
	exitsZero(t, ctl2Done, "etcdctl lock, once dlock run released")
}
