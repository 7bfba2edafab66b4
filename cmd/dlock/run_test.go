package main

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlockgo/dlock/internal/testenv"
)

// backendsUnderTest are the backends the run tests use: the default (no
// --backend: lock files in the state directory) and Redis.
func backendsUnderTest(t *testing.T) map[string][]string {
	return map[string][]string{
		"file-default": nil,
		"redis":        {"--backend", "redis://" + testenv.RedisAddr(t)},
	}
}

// TestRunOneOfThree starts three `dlock run --no-wait` of one name at
// once: exactly one runs its command, the others exit with the busy code
// and one line on stderr. The winner's command holds until the losers are
// done, so the outcome does not depend on how fast processes start. Also
// on a Sentinel-managed Redis, a Redis Cluster and a NATS JetStream
// server, opened by their URLs.
func TestRunOneOfThree(t *testing.T) {
	backends := backendsUnderTest(t)
	ps := testenv.StartSentinel(t, testenv.SentinelOptions{})
	backends["redis-sentinel"] = []string{"--backend", "redis+sentinel://" + strings.Join(ps.SentinelAddrs(), ",") + "?master_name=" + testenv.SentinelMaster}
	cs := testenv.StartRedisCluster(t, testenv.ClusterOptions{})
	a := cs.Addrs()
	backends["redis-cluster"] = []string{"--backend", "redis+cluster://" + a[0] + "?addr=" + a[1] + "&addr=" + a[2]}
	backends["nats"] = []string{"--backend", "nats://" + testenv.StartNATS(t, 1).URL() + "/dlock-cli"}
	for label, backend := range backends {
		t.Run(label, func(t *testing.T) {
			c := newCLI(t)
			dir := t.TempDir()
			ran, release := filepath.Join(dir, "ran"), filepath.Join(dir, "release")
			name := uniqueName(t, "job")
			script := `echo "$DLOCK_TOKEN" >> "$1"; while [ ! -e "$2" ]; do sleep 0.02; done`
			var procs []*started
			for range 3 {
				args := append(append([]string{"run"}, backend...), "--no-wait", name, "--", "sh", "-c", script, "sh", ran, release)
				procs = append(procs, c.start(args...))
			}
			// Two must give up at once; the third holds until release exists.
			exited := make(chan int, 3)
			for _, p := range procs {
				go func() { exited <- p.wait(time.Minute) }()
			}
			for range 2 {
				select {
				case code := <-exited:
					if code != exitBusy {
						t.Fatalf("a losing dlock run exited %d, want the busy code %d", code, exitBusy)
					}
				case <-time.After(30 * time.Second):
					t.Fatal("two of three dlock run --no-wait did not give up")
				}
			}
			if err := os.WriteFile(release, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			if code := <-exited; code != 0 {
				t.Fatalf("the winning dlock run exited %d, want 0", code)
			}
			b, err := os.ReadFile(ran)
			if err != nil {
				t.Fatal(err)
			}
			lines := strings.Fields(string(b))
			if len(lines) != 1 {
				t.Fatalf("the command ran %d times (tokens %q), want once", len(lines), lines)
			}
			busy := 0
			for _, p := range procs {
				if s := p.stderr.String(); s != "" {
					checkOneLine(t, "busy dlock run", s)
					if !strings.Contains(s, "held by another owner") || !strings.Contains(s, name) {
						t.Errorf("busy message does not say the lock is held: %q", s)
					}
					busy++
				}
			}
			if busy != 2 {
				t.Errorf("%d processes printed a busy line, want 2", busy)
			}
		})
	}
}

// TestRunPassesTokenAndName checks the command's environment, and that
// successive runs get increasing tokens.
func TestRunPassesTokenAndName(t *testing.T) {
	for label, backend := range backendsUnderTest(t) {
		t.Run(label, func(t *testing.T) {
			c := newCLI(t)
			name := uniqueName(t, "env")
			var last uint64
			for i := range 2 {
				args := append(append([]string{"run"}, backend...), name, "--", "sh", "-c", `echo "$DLOCK_NAME $DLOCK_TOKEN"`)
				r := c.run(args...)
				if r.code != 0 {
					t.Fatalf("dlock run exited %d: %s", r.code, r.stderr)
				}
				f := strings.Fields(r.stdout)
				if len(f) != 2 || f[0] != name {
					t.Fatalf("command printed %q, want %q and a token", r.stdout, name)
				}
				tok, err := strconv.ParseUint(f[1], 10, 64)
				if err != nil || tok == 0 {
					t.Fatalf("DLOCK_TOKEN = %q, want a positive integer", f[1])
				}
				if i > 0 && tok <= last {
					t.Fatalf("second run's token %d is not above the first's %d", tok, last)
				}
				last = tok
			}
		})
	}
}

func TestRunExitCodes(t *testing.T) {
	c := newCLI(t)
	name := uniqueName(t, "codes")
	for _, tc := range []struct {
		cmd  []string
		want int
	}{
		{[]string{"true"}, 0},
		{[]string{"sh", "-c", "exit 3"}, 3},
		{[]string{"sh", "-c", "kill -TERM $$"}, 128 + int(syscall.SIGTERM)},
		{[]string{"/nonexistent/command"}, exitNotFound},
		{[]string{t.TempDir()}, exitCannotExec}, // a directory
	} {
		r := c.run(append([]string{"run", name, "--"}, tc.cmd...)...)
		if r.code != tc.want {
			t.Errorf("dlock run -- %q: exit %d, want %d (stderr %q)", tc.cmd, r.code, tc.want, r.stderr)
		}
	}
	// Without "--", the command's own flags stay its own.
	if r := c.run("run", "--no-wait", name, "sh", "-c", "exit 4"); r.code != 4 {
		t.Errorf("dlock run NAME sh -c 'exit 4' (no --): exit %d, want 4 (stderr %q)", r.code, r.stderr)
	}
	// The lock is free after each of them.
	if r := c.run("run", "--no-wait", name, "--", "true"); r.code != 0 {
		t.Fatalf("lock still held after the runs above: exit %d, %s", r.code, r.stderr)
	}
}

// TestRunBusyCodeAndWait checks --busy-exit-code and a bounded --wait.
func TestRunBusyCodeAndWait(t *testing.T) {
	c := newCLI(t)
	name := uniqueName(t, "busy")
	holder := c.start("run", name, "--", "sh", "-c", "echo held; exec sleep 30")
	if l := holder.line(30 * time.Second); l != "held" {
		t.Fatalf("holder printed %q", l)
	}
	r := c.run("run", "--no-wait", "--busy-exit-code", "3", name, "--", "true")
	if r.code != 3 {
		t.Fatalf("--busy-exit-code 3: exit %d, want 3 (%s)", r.code, r.stderr)
	}
	r = c.run("run", "--wait", "300ms", name, "--", "true")
	if r.code != exitBusy {
		t.Fatalf("--wait 300ms on a held lock: exit %d, want %d (%s)", r.code, exitBusy, r.stderr)
	}
	checkOneLine(t, "--wait timeout", r.stderr)
	if r.elapsed < 300*time.Millisecond {
		t.Fatalf("--wait 300ms gave up after %v", r.elapsed)
	}
	holder.signal(syscall.SIGTERM)
	if code := holder.wait(30 * time.Second); code != 128+int(syscall.SIGTERM) {
		t.Fatalf("holder exited %d after SIGTERM, want %d", code, 128+int(syscall.SIGTERM))
	}
}

// TestRunLostLockTerminatesCommand deletes the lock's key on the Redis
// server while the command runs: dlock's renewal finds it gone, the
// command's process group gets SIGTERM (then SIGKILL: this command ignores
// SIGTERM), and dlock exits with the lost code.
func TestRunLostLockTerminatesCommand(t *testing.T) {
	rdb := testenv.RedisClient(t)
	c := newCLI(t)
	for _, tc := range []struct {
		label  string
		script string
		grace  time.Duration
	}{
		{"obeys-SIGTERM", `echo $$; exec sleep 30`, 5 * time.Second},
		{"ignores-SIGTERM", `trap '' TERM; echo $$; while :; do sleep 0.05; done`, 700 * time.Millisecond},
	} {
		t.Run(tc.label, func(t *testing.T) {
			name := uniqueName(t, "lost")
			p := c.start("run", "--backend", "redis://"+testenv.RedisAddr(t), "--ttl", "600ms", "--grace", tc.grace.String(),
				name, "--", "sh", "-c", tc.script)
			pid, err := strconv.Atoi(p.line(30 * time.Second))
			if err != nil {
				t.Fatalf("command printed no pid: %v", err)
			}
			key := "dlock:{" + name + "}"
			n, err := rdb.Del(context.Background(), key).Result()
			if err != nil || n != 1 {
				t.Fatalf("DEL %s = %d, %v; want the lock's key deleted", key, n, err)
			}
			deleted := time.Now()
			code := p.wait(30 * time.Second)
			if code != exitLost {
				t.Fatalf("dlock exited %d after its lock was deleted, want the lost code %d; stderr: %s", code, exitLost, p.stderr)
			}
			if !strings.Contains(p.stderr.String(), "lost") {
				t.Errorf("stderr does not say the lock was lost: %q", p.stderr)
			}
			if tc.grace < time.Second {
				if el := time.Since(deleted); el < tc.grace {
					t.Errorf("a command that ignores SIGTERM was gone %v after the loss, before its grace of %v", el, tc.grace)
				}
			}
			if !processGone(pid) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
				t.Fatalf("the command (pid %d) still runs after dlock exited", pid)
			}
		})
	}
}

// TestRunLostLockFileBackend removes the lock file of the default backend
// while the command runs (the one way to lose a flock): the next renewal
// sees it, and dlock stops the command and exits with the lost code.
func TestRunLostLockFileBackend(t *testing.T) {
	c := newCLI(t)
	name := uniqueName(t, "lost-file")
	p := c.start("run", "--ttl", "300ms", "--lost-exit-code", "99", name, "--", "sh", "-c", "echo $$; exec sleep 30")
	pid, err := strconv.Atoi(p.line(30 * time.Second))
	if err != nil {
		t.Fatalf("command printed no pid: %v", err)
	}
	if err := os.Remove(filepath.Join(c.state, "dlock", name+".lock")); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(30 * time.Second); code != 99 {
		t.Fatalf("dlock exited %d after its lock file was removed, want --lost-exit-code 99; stderr: %s", code, p.stderr)
	}
	if !processGone(pid) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		t.Fatalf("the command (pid %d) still runs after dlock exited", pid)
	}
}

// TestRunSignalReleases sends SIGINT (Ctrl-C) to dlock while its command
// runs: the command gets it, dlock exits with its status, and the lock is
// free at once for the next run.
func TestRunSignalReleases(t *testing.T) {
	for label, backend := range backendsUnderTest(t) {
		t.Run(label, func(t *testing.T) {
			c := newCLI(t)
			name := uniqueName(t, "sigint")
			p := c.start(append(append([]string{"run"}, backend...), name, "--", "sh", "-c", "echo ready; exec sleep 30")...)
			if l := p.line(30 * time.Second); l != "ready" {
				t.Fatalf("command printed %q", l)
			}
			p.signal(syscall.SIGINT)
			if code := p.wait(30 * time.Second); code != 128+int(syscall.SIGINT) {
				t.Fatalf("dlock exited %d after SIGINT, want %d (the command's death by SIGINT); stderr: %s", code, 128+int(syscall.SIGINT), p.stderr)
			}
			r := c.run(append(append([]string{"run"}, backend...), "--no-wait", name, "--", "true")...)
			if r.code != 0 {
				t.Fatalf("after Ctrl-C, dlock run --no-wait exited %d (%s): the lock was not released", r.code, r.stderr)
			}
		})
	}
}

// TestRunSignalWhileWaiting interrupts a dlock run that waits for a held
// lock: it exits promptly with 128+SIGINT and never runs its command.
func TestRunSignalWhileWaiting(t *testing.T) {
	c := newCLI(t)
	name := uniqueName(t, "waiting")
	holder := c.start("run", name, "--", "sh", "-c", "echo held; exec sleep 30")
	holder.line(30 * time.Second)
	marker := filepath.Join(t.TempDir(), "ran")
	w := c.start("run", "--log-level", "debug", name, "--", "touch", marker)
	// The signal must come once it waits: its debug line says so (a
	// race-built binary can take longer to start than any fixed pause).
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(w.stderr.String(), "dlock: acquiring"); {
		if time.Now().After(deadline) {
			t.Fatalf("the waiting dlock never logged that it is acquiring; stderr: %s", w.stderr)
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // into the wait, past the first attempt
	w.signal(syscall.SIGINT)
	if code := w.wait(10 * time.Second); code != 128+int(syscall.SIGINT) {
		t.Fatalf("waiting dlock exited %d after SIGINT, want %d", code, 128+int(syscall.SIGINT))
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the interrupted waiter ran its command")
	}
	holder.signal(syscall.SIGTERM)
	holder.wait(30 * time.Second)
}

// TestRunMaxHold: --max-hold ends a command that would hold the lock for
// ever, on time, with the lost code, and the lock is free at once after.
func TestRunMaxHold(t *testing.T) {
	c := newCLI(t)
	backend := "redis://" + testenv.RedisAddr(t)
	name := uniqueName(t, "max-hold")
	start := time.Now()
	r := c.run("run", "--backend", backend, "--ttl", "300ms", "--max-hold", "1s", "--grace", "1s", name, "--", "sleep", "30")
	took := time.Since(start)
	if r.code != exitLost {
		t.Fatalf("exit %d, want the lost code %d; stderr: %s", r.code, exitLost, r.stderr)
	}
	// Never before the cap; the upper bound only says it did not hang.
	if took < time.Second || took > 30*time.Second {
		t.Errorf("dlock run took %v with --max-hold 1s", took)
	}
	if !strings.Contains(r.stderr, "maximum hold") {
		t.Errorf("stderr does not name the max hold: %q", r.stderr)
	}
	if r := c.run("run", "--backend", backend, "--no-wait", name, "--", "true"); r.code != 0 {
		t.Errorf("the next run after the max hold: exit %d: %s", r.code, r.stderr)
	}
	if r := c.run("run", "--max-hold", "-1s", name, "--", "true"); r.code != exitUsage {
		t.Errorf("--max-hold -1s: exit %d, want %d", r.code, exitUsage)
	}
}
