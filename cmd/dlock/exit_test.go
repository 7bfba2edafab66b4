package main

import (
	"context"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/redis/go-redis/v9"
)

// The tests in this file check that dlock run exits only after the
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
