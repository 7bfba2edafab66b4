package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlockgo/dlock/internal/testenv"
)

// binary is the dlock binary that TestMain builds for the end-to-end tests.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "dlock-cli-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "dlock")
	// go test puts its own GOROOT/bin first on the test's PATH.
	goBin, err := exec.LookPath("go")
	if err != nil {
		fmt.Fprintln(os.Stderr, "build dlock:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	args := []string{"build", "-o", binary}
	if raceEnabled {
		args = append(args, "-race")
	}
	build := exec.Command(goBin, append(args, ".")...)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build dlock:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// cli runs dlock processes for one test, with a state directory of the
// test's own: the default backend (file://) lives there.
type cli struct {
	t     *testing.T
	state string
}

func newCLI(t *testing.T) *cli {
	t.Helper()
	return &cli{t: t, state: t.TempDir()}
}

// command returns an unstarted dlock process with args.
func (c *cli) command(args ...string) *exec.Cmd {
	cmd := exec.Command(binary, args...)
	// A binary built with -race sleeps a second at exit unless told not to.
	cmd.Env = append(os.Environ(), "XDG_STATE_HOME="+c.state, "DLOCK_BACKEND=", "GORACE=atexit_sleep_ms=0 halt_on_error=1")
	return cmd
}

// result is how a dlock process ended.
type result struct {
	code           int
	stdout, stderr string
	elapsed        time.Duration
}

// run runs dlock with args to its end, within a minute.
func (c *cli) run(args ...string) result {
	c.t.Helper()
	cmd := c.command(args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	if err := cmd.Start(); err != nil {
		c.t.Fatalf("start dlock %q: %v", args, err)
	}
	code := waitCode(c.t, cmd, time.Minute)
	return result{code: code, stdout: out.String(), stderr: errb.String(), elapsed: time.Since(start)}
}

// waitCode waits for cmd, at most d, and returns its exit code.
func waitCode(t *testing.T, cmd *exec.Cmd, d time.Duration) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatalf("wait for dlock: %v", err)
		}
		return cmd.ProcessState.ExitCode()
	case <-time.After(d):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("dlock %q did not exit within %v", cmd.Args[1:], d)
		return -1
	}
}

// started is a dlock process running in the background, whose stdout is
// read line by line.
type started struct {
	t      *testing.T
	cmd    *exec.Cmd
	lines  chan string
	stderr *testenv.Buffer
}

// start starts dlock with args; it is killed if still running when the
// test ends.
func (c *cli) start(args ...string) *started {
	c.t.Helper()
	cmd := c.command(args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		c.t.Fatal(err)
	}
	s := &started{t: c.t, cmd: cmd, lines: make(chan string, 100), stderr: &testenv.Buffer{}}
	cmd.Stderr = s.stderr
	if err := cmd.Start(); err != nil {
		c.t.Fatalf("start dlock %q: %v", args, err)
	}
	go func() {
		defer close(s.lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			s.lines <- sc.Text()
		}
	}()
	c.t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_, _ = cmd.Process.Wait()
		}
	})
	return s
}

// line returns the next line the process (or its command) printed.
func (s *started) line(d time.Duration) string {
	s.t.Helper()
	select {
	case l, ok := <-s.lines:
		if !ok {
			s.t.Fatalf("dlock %q ended its output without the expected line; stderr: %s", s.cmd.Args[1:], s.stderr)
		}
		return l
	case <-time.After(d):
		s.t.Fatalf("dlock %q printed no line within %v; stderr: %s", s.cmd.Args[1:], d, s.stderr)
		return ""
	}
}

// wait waits for the process to exit and returns its exit code.
func (s *started) wait(d time.Duration) int {
	s.t.Helper()
	for range s.lines { // drain, so that the command never blocks on its output
	}
	return waitCode(s.t, s.cmd, d)
}

func (s *started) signal(sig syscall.Signal) {
	s.t.Helper()
	if err := s.cmd.Process.Signal(sig); err != nil {
		s.t.Fatalf("signal dlock: %v", err)
	}
}

// checkOneLine fails t unless s is exactly one non-empty line with no
// sign of a Go panic or stack trace.
func checkOneLine(t *testing.T, what, s string) {
	t.Helper()
	if strings.Count(s, "\n") != 1 || !strings.HasSuffix(s, "\n") || strings.TrimSpace(s) == "" {
		t.Errorf("%s: stderr is not one line: %q", what, s)
	}
	for _, bad := range []string{"panic", "goroutine ", ".go:"} {
		if strings.Contains(s, bad) {
			t.Errorf("%s: stderr looks like a stack trace (%q): %q", what, bad, s)
		}
	}
}

// uniqueName returns a lock name no other test run uses.
func uniqueName(t *testing.T, base string) string {
	return fmt.Sprintf("%s-%d-%s", base, os.Getpid(), newID())
}

// processGone reports whether no process has pid (a zombie counts as
// gone: it runs nothing).
func processGone(pid int) bool {
	err := syscall.Kill(pid, 0)
	if errors.Is(err, syscall.ESRCH) {
		return true
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return errors.Is(err, os.ErrNotExist)
	}
	// The state follows the command name in parentheses.
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && b[i+2] == 'Z'
}
