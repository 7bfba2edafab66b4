package main

import (
	"net"
	"strconv"
	"strings"
	"testing"
)

// closedPort returns a loopback port where nothing listens.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	return strconv.Itoa(port)
}

// TestGoRedisLogsFollowLogLevel: go-redis logs each failed dial through a
// process-wide logger of its own, to stderr unless told otherwise. Against
// a closed port the CLI must print only its one-line error at the default
// log level, and go-redis's lines, as debug records, with --log-level
// debug; for redis:// (which fails at open) and redlock:// (which fails
// at the acquisition, after dialing every node).
func TestGoRedisLogsFollowLogLevel(t *testing.T) {
	c := newCLI(t)
	for _, backend := range []string{
		"redis://127.0.0.1:" + closedPort(t),
		"redlock://127.0.0.1:" + closedPort(t) + ",127.0.0.1:" + closedPort(t) + ",127.0.0.1:" + closedPort(t),
	} {
		scheme, _, _ := strings.Cut(backend, ":")
		t.Run(scheme, func(t *testing.T) {
			r := c.run("run", "--no-wait", "--backend", backend, "job", "--", "true")
			if r.code != exitUnavailable {
				t.Fatalf("exit %d, want %d (unavailable); stderr:\n%s", r.code, exitUnavailable, r.stderr)
			}
			if lines := strings.Split(strings.TrimSpace(r.stderr), "\n"); len(lines) != 1 || !strings.HasPrefix(lines[0], "dlock run: ") {
				t.Errorf("default log level: stderr\n%s\nwant only dlock's one-line error", r.stderr)
			}
			if strings.Contains(r.stderr, "failed to dial") {
				t.Errorf("default log level: go-redis's messages on stderr:\n%s", r.stderr)
			}

			r = c.run("run", "--no-wait", "--backend", backend, "--log-level", "debug", "job", "--", "true")
			var redisLines int
			for l := range strings.Lines(r.stderr) {
				if strings.Contains(l, "logger=go-redis") {
					redisLines++
					if !strings.Contains(l, "level=DEBUG") || !strings.Contains(l, "failed to dial") {
						t.Errorf("go-redis record %q, want a debug record of the failed dial", l)
					}
				}
			}
			if redisLines == 0 {
				t.Errorf("--log-level debug: no go-redis record on stderr:\n%s", r.stderr)
			}
		})
	}
}
