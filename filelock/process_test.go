package filelock_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/filelock"
	"github.com/dlockgo/dlock/locktest"
)

// The subprocess tests re-run this test binary as lock holders: with
// FILELOCK_HELPER set, TestHelperProcess is a small program that takes
// locks and reports on stdout, one "key value..." line per event.
const helperEnv = "FILELOCK_HELPER"

// TestHelperProcess is the subprocess's entry point; on its own it does
// nothing.
func TestHelperProcess(t *testing.T) {
	mode := os.Getenv(helperEnv)
	if mode == "" {
		return
	}
	ctx := context.Background()
	dir, name := os.Getenv("FILELOCK_DIR"), os.Getenv("FILELOCK_NAME")
	l, err := filelock.New(dir, nil)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	switch mode {
	case "hold": // take the lock and keep it until killed
		lease, err := l.Acquire(ctx, name)
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		fmt.Println("token", lease.Token())
		time.Sleep(time.Hour)
	case "write": // take the readers-writer lock for writing, report, hold until killed
		fmt.Println("ready")
		lease, err := l.AcquireWrite(ctx, name)
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		fmt.Println("token", lease.Token())
		time.Sleep(time.Hour)
	case "once": // take the lock, report the token, release it
		lease, err := l.Acquire(ctx, name)
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		fmt.Println("token", lease.Token())
		if err := lease.Release(ctx); err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
	case "count": // increment a counter file under the lock, rounds times
		rounds, _ := strconv.Atoi(os.Getenv("FILELOCK_ROUNDS"))
		counter := os.Getenv("FILELOCK_COUNTER")
		fmt.Println("ready")
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n') // all start together
		for range rounds {
			lease, err := l.Acquire(ctx, name)
			if err != nil {
				fmt.Println("error", err)
				os.Exit(1)
			}
			b, _ := os.ReadFile(counter)
			v, _ := strconv.Atoi(strings.TrimSpace(string(b)))
			time.Sleep(50 * time.Microsecond) // widen the window for a lost update
			if err := os.WriteFile(counter, []byte(strconv.Itoa(v+1)), 0o600); err != nil {
				fmt.Println("error", err)
				os.Exit(1)
			}
			fmt.Println("crit", v, lease.Token(), os.Getpid())
			if err := lease.Release(ctx); err != nil {
				fmt.Println("error", err)
				os.Exit(1)
			}
		}
	}
	_ = l.Close()
	os.Exit(0)
}

// helper is a running subprocess and its report lines.
type helper struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan []string
}

func startHelper(t *testing.T, mode, dir, name string, env ...string) *helper {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"="+mode, "FILELOCK_DIR="+dir, "FILELOCK_NAME="+name,
		"GORACE="+os.Getenv("GORACE")+" atexit_sleep_ms=0") // under -race, exit without the default 1s pause
	cmd.Env = append(cmd.Env, env...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &helper{cmd: cmd, stdin: in, lines: make(chan []string, 1024)}
	go h.scan(out)
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return h
}

func (h *helper) scan(r io.Reader) {
	defer close(h.lines)
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) > 0 && (f[0] == "token" || f[0] == "crit" || f[0] == "ready" || f[0] == "error") {
			h.lines <- f
		}
	}
}

// next returns the helper's next report line with the key, failing t on
// an error line, on exit, or after limit.
func (h *helper) next(t *testing.T, key string, limit time.Duration) []string {
	t.Helper()
	select {
	case f, ok := <-h.lines:
		if !ok {
			t.Fatalf("helper exited before reporting %q", key)
		}
		if f[0] != key {
			t.Fatalf("helper reported %q, want %q", f, key)
		}
		return f
	case <-time.After(limit):
		t.Fatalf("helper did not report %q within %v", key, limit)
	}
	return nil
}

func parseUint(t *testing.T, s string) uint64 {
	t.Helper()
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestProcessKilledHolder: a lock held by another process excludes this
// one; when the holder is killed with SIGKILL, its lock is free at once —
// both to a waiter that was already waiting and to a TryAcquire right after
// the process is gone.
func TestProcessKilledHolder(t *testing.T) {
	ctx := locktest.Context(t, 60*time.Second)
	dir := t.TempDir()
	l, _ := newLocker(t, dir)
	if runtime.GOOS == "linux" {
		// A backstop of 30 s: a waiter that gets the lock within 5 s of the
		// holder's death was woken by the kernel's event.
		defer filelock.SetBackstop(30 * time.Second)()
	}

	// A waiter already waiting when the holder dies.
	h := startHelper(t, "hold", dir, "job")
	tok := parseUint(t, h.next(t, "token", 30*time.Second)[1])
	if _, err := l.TryAcquire(ctx, "job"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryAcquire while another process holds the lock = %v, want ErrNotAcquired", err)
	}
	got := acquireAsync(t, func() (*dlock.Lease, error) { return l.Acquire(ctx, "job") })
	if !settle(5*time.Second, func() bool { return filelock.Waiters() == 1 }) {
		t.Fatal("the waiter never registered")
	}
	killed := time.Now()
	if err := h.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	lease := <-got
	if lease == nil {
		t.FailNow()
	}
	wait := time.Since(killed)
	t.Logf("the waiter acquired %v after SIGKILL to the holder", wait)
	if limit := 5 * time.Second; runtime.GOOS == "linux" && wait > limit {
		t.Errorf("the waiter took %v to acquire after the holder was killed, with a backstop of 30 s; want it woken by the kernel's event, within %v", wait, limit)
	}
	if lease.Token() <= tok {
		t.Errorf("token %d after the killed holder's %d", lease.Token(), tok)
	}
	_ = lease.Release(ctx)
	_ = h.cmd.Wait()

	// TryAcquire right after the holder's death.
	h = startHelper(t, "hold", dir, "job")
	tok = parseUint(t, h.next(t, "token", 30*time.Second)[1])
	if _, err := l.TryAcquire(ctx, "job"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryAcquire while another process holds the lock = %v, want ErrNotAcquired", err)
	}
	_ = h.cmd.Process.Signal(syscall.SIGKILL)
	_ = h.cmd.Wait()
	lease, err := l.TryAcquire(ctx, "job")
	if err != nil {
		t.Fatalf("TryAcquire right after the holder died: %v", err)
	}
	if lease.Token() <= tok {
		t.Errorf("token %d after the killed holder's %d", lease.Token(), tok)
	}
	_ = lease.Release(ctx)
}

// TestProcessContention: processes increment a counter file under the
// lock; no update is lost, and the tokens, in the order of the counter's
// values, strictly increase across processes.
func TestProcessContention(t *testing.T) {
	const procs, rounds = 4, 40
	dir := t.TempDir()
	counter := filepath.Join(t.TempDir(), "counter")
	var wg sync.WaitGroup
	var mu sync.Mutex
	type section struct {
		token uint64
		pid   string
	}
	byValue := map[int]section{}
	var helpers []*helper
	for range procs {
		h := startHelper(t, "count", dir, "counter", "FILELOCK_ROUNDS="+strconv.Itoa(rounds), "FILELOCK_COUNTER="+counter)
		h.next(t, "ready", 30*time.Second)
		helpers = append(helpers, h)
	}
	for _, h := range helpers {
		_, _ = io.WriteString(h.stdin, "go\n")
	}
	for _, h := range helpers {
		wg.Go(func() {
			for f := range h.lines {
				if f[0] != "crit" || len(f) != 4 {
					t.Errorf("helper: %q", f)
					continue
				}
				v, _ := strconv.Atoi(f[1])
				tok, _ := strconv.ParseUint(f[2], 10, 64)
				mu.Lock()
				if _, dup := byValue[v]; dup {
					t.Errorf("two critical sections read the counter at %d: a lost update", v)
				}
				byValue[v] = section{tok, f[3]}
				mu.Unlock()
			}
			if err := h.cmd.Wait(); err != nil {
				t.Errorf("helper: %v", err)
			}
		})
	}
	wg.Wait()
	b, err := os.ReadFile(counter)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(b)); got != strconv.Itoa(procs*rounds) {
		t.Errorf("counter = %s after %d increments", got, procs*rounds)
	}
	values := slices.Sorted(func(yield func(int) bool) {
		for v := range byValue {
			if !yield(v) {
				return
			}
		}
	})
	switches := 0
	for i := 1; i < len(values); i++ {
		cur, prev := byValue[values[i]], byValue[values[i-1]]
		if cur.token <= prev.token {
			t.Errorf("token %d at counter %d is not above token %d at counter %d",
				cur.token, values[i], prev.token, values[i-1])
		}
		if cur.pid != prev.pid {
			switches++
		}
	}
	t.Logf("the lock passed between processes %d times in %d critical sections", switches, len(values))
	if switches < procs {
		t.Errorf("the processes hardly contended (%d hand-overs between them); the test proves little", switches)
	}
}

// TestTokenSurvivesRestart: each process that takes the lock gets a
// greater token than the process before it, even when the lock file was
// deleted in between.
func TestTokenSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	var last uint64
	for i := range 4 {
		if i == 3 {
			if err := os.Remove(lockPath(t, dir, "restart")); err != nil {
				t.Fatal(err)
			}
		}
		h := startHelper(t, "once", dir, "restart")
		tok := parseUint(t, h.next(t, "token", 30*time.Second)[1])
		if err := h.cmd.Wait(); err != nil {
			t.Fatal(err)
		}
		if tok <= last {
			t.Errorf("process %d got token %d, not above the previous process's %d", i, tok, last)
		}
		last = tok
	}
}
