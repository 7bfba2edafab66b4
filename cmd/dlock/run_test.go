package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

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

// forEachBackend runs test as a subtest on each of backendsUnderTest, with
// a cli of its own.
func forEachBackend(t *testing.T, test func(t *testing.T, c *cli, backend []string)) {
	for label, backend := range backendsUnderTest(t) {
		t.Run(label, func(t *testing.T) { test(t, newCLI(t), backend) })
	}
}

// TestRunOneOfThree starts three `dlock run --no-wait` of one name at
// once: exactly one runs its command, the others exit with the busy code
// and one line on stderr. The winner's command holds until the losers are
// done, so the outcome does not depend on how fast processes start. Also
// on a Sentinel-managed Redis, a Redis Cluster, a NATS JetStream server
// and S3 (versitygw), Azure Blob (Azurite) and Google Cloud Storage
// (fake-gcs-server) stores, opened by their URLs.
func TestRunOneOfThree(t *testing.T) {
	backends := backendsUnderTest(t)
	ps := testenv.StartSentinel(t, testenv.SentinelOptions{})
	backends["redis-sentinel"] = []string{"--backend", "redis+sentinel://" + strings.Join(ps.SentinelAddrs(), ",") + "?master_name=" + testenv.SentinelMaster}
	cs := testenv.StartRedisCluster(t, testenv.ClusterOptions{})
	a := cs.Addrs()
	backends["redis-cluster"] = []string{"--backend", "redis+cluster://" + a[0] + "?addr=" + a[1] + "&addr=" + a[2]}
	backends["nats"] = []string{"--backend", "nats://" + testenv.StartNATS(t, 1).URL() + "/dlock-cli"}
	testenv.SetS3Env(t)
	backends["s3"] = []string{"--backend", testenv.StartS3(t).URL("dlock-cli")}
	testenv.SetAzureEnv(t)
	backends["azblob"] = []string{"--backend", testenv.StartAzure(t).URL("dlock-cli")}
	gcs := testenv.StartGCS(t)
	gcs.SetEnv(t)
	backends["gs"] = []string{"--backend", gcs.URL("dlock-cli")}
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
	forEachBackend(t, func(t *testing.T, c *cli, backend []string) {
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
	forEachBackend(t, func(t *testing.T, c *cli, backend []string) {
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
	if !strings.Contains(r.stderr, "--max-hold 1s ran out") || strings.Contains(r.stderr, "WithMaxHold") {
		t.Errorf("stderr does not name --max-hold in the CLI's words: %q", r.stderr)
	}
	if r := c.run("run", "--backend", backend, "--no-wait", name, "--", "true"); r.code != 0 {
		t.Errorf("the next run after the max hold: exit %d: %s", r.code, r.stderr)
	}
	if r := c.run("run", "--max-hold", "-1s", name, "--", "true"); r.code != exitUsage {
		t.Errorf("--max-hold -1s: exit %d, want %d", r.code, exitUsage)
	}
}

// TestRunExitsAfterRelease checks that dlock run exits only after the
// release it owes the store: after --max-hold, after a lost lock, on a
// signal. Each holds the store's answer back with CLIENT PAUSE WRITE on a
// Redis server of its own, for pauseFor from just after the grant: the
// release reaches the server during the pause and runs when the pause
// ends, provided its client is still connected (Redis drops a paused
// command whose client has gone). A dlock run that exited without waiting
// leaves the lock held for its TTL, every time.
//
// The detached holder of dlock acquire exits through the same Locker.Close
// (and so waits for the same unlocks). It runs only on the backends whose
// lock lives with a session or a file descriptor (zk, etcd, postgres,
// mysql, file): there the driver's Close ends that session, which frees
// the lock on the store whether or not an unlock got there first, so its
// exit cannot leave the lock held (TestHandleMaxHold checks the file case).

// pauseFor is how long the server holds writes back: well past the moment
// (1 s after the grant) the lease ends, and within the 5 s that Close
// waits for an unlock.
const pauseFor = 3 * time.Second

// pauseWrites makes the server of c hold every write back for d.
func pauseWrites(t *testing.T, c *redis.Client, d time.Duration) {
	t.Helper()
	if err := c.Do(context.Background(), "CLIENT", "PAUSE", d.Milliseconds(), "WRITE").Err(); err != nil {
		t.Fatalf("CLIENT PAUSE: %v", err)
	}
}

// scriptCalls is how many scripts the server of c has run (every dlock
// write to Redis is a script).
func scriptCalls(t *testing.T, c *redis.Client) int {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(info, "\n") {
		name, stats, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || (name != "cmdstat_eval" && name != "cmdstat_evalsha") {
			continue
		}
		for _, kv := range strings.Split(stats, ",") {
			if v, ok := strings.CutPrefix(kv, "calls="); ok {
				c, _ := strconv.Atoi(v)
				n += c
			}
		}
	}
	return n
}

// waitUnpaused waits until the pause started at start is over.
func waitUnpaused(start time.Time) {
	time.Sleep(time.Until(start.Add(pauseFor + 200*time.Millisecond)))
}

// TestRunExitsAfterRelease: dlock run releases the lock on the store
// before it exits, whether the command ends after a signal or is ended at
// --max-hold; after a lost lock, it exits only after its unlock has been
// answered.
func TestRunExitsAfterRelease(t *testing.T) {
	c := newCLI(t)
	srv := testenv.StartRedis(t, testenv.RedisOptions{})
	rc := srv.Client()
	backend := "redis://" + srv.Addr
	for _, tc := range []struct {
		name string
		args []string
		end  func(s *started) // after the pause began
		code int
	}{
		{"max hold", []string{"--max-hold", "1s"}, func(*started) {}, exitLost},
		{"SIGTERM", nil, func(s *started) { s.signal(syscall.SIGTERM) }, 128 + int(syscall.SIGTERM)},
		{"SIGINT", nil, func(s *started) { s.signal(syscall.SIGINT) }, 128 + int(syscall.SIGINT)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := uniqueName(t, "exit")
			args := append([]string{"run", "--backend", backend, "--ttl", "1m", "--grace", "1s"}, tc.args...)
			s := c.start(append(args, name, "--", "sh", "-c", "echo held; exec sleep 30")...)
			if l := s.line(30 * time.Second); l != "held" {
				t.Fatalf("first line %q, want held", l)
			}
			start := time.Now()
			pauseWrites(t, rc, pauseFor)
			tc.end(s)
			if code := s.wait(time.Minute); code != tc.code {
				t.Fatalf("dlock run exited %d, want %d; stderr: %s", code, tc.code, s.stderr)
			}
			waitUnpaused(start) // a release still queued on a live client runs now
			if r := c.run("run", "--backend", backend, "--no-wait", name, "--", "true"); r.code != 0 {
				t.Fatalf("the next run after dlock run exited: exit %d: %s", r.code, r.stderr)
			}
		})
	}
	// Lost: writes held back past the TTL, so renewal fails and the lease
	// ends as lost. The store forgets the lock by its TTL either way; what
	// shows that dlock waited for its unlock is that the unlock ran.
	t.Run("lost", func(t *testing.T) {
		name := uniqueName(t, "exit")
		s := c.start("run", "--backend", backend, "--ttl", "1s", "--grace", "1s", name, "--", "sh", "-c", "echo held; exec sleep 30")
		if l := s.line(30 * time.Second); l != "held" {
			t.Fatalf("first line %q, want held", l)
		}
		start := time.Now()
		before := scriptCalls(t, rc)
		pauseWrites(t, rc, pauseFor)
		if code := s.wait(time.Minute); code != exitLost {
			t.Fatalf("dlock run exited %d, want %d; stderr: %s", code, exitLost, s.stderr)
		}
		waitUnpaused(start)
		if after := scriptCalls(t, rc); after == before {
			t.Fatalf("dlock run exited before its unlock after the loss ran (scripts run: %d before the pause and after it)", before)
		}
	})
}

// TestRunServesMetrics runs dlock run --metrics-addr on a free loopback
// port, scrapes /metrics while the command holds the lock, and finds
// dlock's series there: one successful acquisition, one lease held, and
// no lock name among the labels.
func TestRunServesMetrics(t *testing.T) {
	c := newCLI(t)
	name := uniqueName(t, "metrics")
	p := c.start("run", "--metrics-addr", "127.0.0.1:0", "--log-level", "info", "--log-json", name, "--", "sh", "-c", "echo ready; exec sleep 30")
	if l := p.line(30 * time.Second); l != "ready" {
		t.Fatalf("command printed %q", l)
	}
	addr := ""
	for _, line := range strings.Split(p.stderr.String(), "\n") {
		var rec struct {
			Msg  string `json:"msg"`
			Addr string `json:"addr"`
		}
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "dlock: serving metrics" {
			addr = rec.Addr
		}
	}
	if !strings.HasPrefix(addr, "127.0.0.1:") {
		t.Fatalf("no 'serving metrics' log line with a loopback address; stderr: %s", p.stderr)
	}
	text := scrape(t, addr)
	for _, want := range []string{
		`dlock_acquisitions_total{backend="file",otel_scope_name="github.com/dlockgo/dlock"`,
		`result="acquired"} 1`,
		`dlock_held{backend="file"`,
		`dlock_acquire_duration_seconds_bucket{`,
		`le="0.001"}`, // buckets in seconds, not OpenTelemetry's default ones
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if !hasSample(text, "dlock_held", "1") {
		t.Errorf("/metrics: dlock_held is not 1 while the command holds the lock")
	}
	if strings.Contains(text, name) {
		t.Errorf("/metrics contains the lock name %q: names must not be label values", name)
	}
	if t.Failed() {
		t.Logf("/metrics:\n%s", text)
	}
	// The log lines carry the lock's name, backend and token.
	if s := p.stderr.String(); !strings.Contains(s, `"name":"`+name+`"`) || !strings.Contains(s, `"token":`) || !strings.Contains(s, `"backend":"file://"`) {
		t.Errorf("the info log lacks name, token or backend: %s", s)
	}
	p.signal(syscall.SIGTERM)
	p.wait(30 * time.Second)
}

// hasSample reports whether text has a sample of metric with value v.
func hasSample(text, metric, v string) bool {
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, metric+"{") && strings.HasSuffix(line, "} "+v) {
			return true
		}
	}
	return false
}
