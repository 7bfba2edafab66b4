package main

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlockgo/dlock/internal/testenv"
)

// TestHandlePipeline is the pipeline story, each step a process of its
// own: acquire prints a handle; a dlock run of the same name is busy
// (75); extend keeps the lock past its first TTL; release frees it, and
// the next dlock run gets it. A handle used after its TTL ran out, when
// another owner holds the lock, is refused (76) and the owner's lock is
// untouched; a garbled handle is a usage error (64).
func TestHandlePipeline(t *testing.T) {
	c := newCLI(t)
	backends := map[string]string{
		"redis":   "redis://" + testenv.RedisAddr(t),
		"redlock": "redlock://" + testenv.Addrs(testenv.StartRedisN(t, 3, testenv.RedisOptions{})) + "?node_timeout=50ms",
	}
	for label, backend := range backends {
		t.Run(label, func(t *testing.T) {
			name := uniqueName(t, "pipeline")
			r := c.run("acquire", "--backend", backend, "--ttl", "2s", name)
			if r.code != 0 {
				t.Fatalf("dlock acquire: exit %d: %s", r.code, r.stderr)
			}
			h := strings.TrimSpace(r.stdout)
			if strings.Count(r.stdout, "\n") != 1 || !strings.HasPrefix(h, "dlock1.") {
				t.Fatalf("dlock acquire printed %q, want one handle line", r.stdout)
			}
			if r := c.run("run", "--backend", backend, "--no-wait", name, "--", "true"); r.code != exitBusy {
				t.Fatalf("dlock run while acquired: exit %d, want %d: %s", r.code, exitBusy, r.stderr)
			}
			time.Sleep(time.Second)
			if r := c.run("extend", "--backend", backend, "--ttl", "3s", h); r.code != 0 {
				t.Fatalf("dlock extend: exit %d: %s", r.code, r.stderr)
			}
			time.Sleep(1500 * time.Millisecond) // past the first TTL, within the extension
			if r := c.run("run", "--backend", backend, "--no-wait", name, "--", "true"); r.code != exitBusy {
				t.Fatalf("dlock run after extend, past the first TTL: exit %d, want %d: %s", r.code, exitBusy, r.stderr)
			}
			if r := c.run("release", "--backend", backend, h); r.code != 0 {
				t.Fatalf("dlock release: exit %d: %s", r.code, r.stderr)
			}
			if r := c.run("run", "--backend", backend, "--no-wait", name, "--", "true"); r.code != 0 {
				t.Fatalf("dlock run after release: exit %d: %s", r.code, r.stderr)
			}
			if r := c.run("release", "--backend", backend, h); r.code != exitLost {
				t.Errorf("a second release: exit %d, want %d: %s", r.code, exitLost, r.stderr)
			}

			// A handle past its TTL, the lock another's.
			r = c.run("acquire", "--backend", backend, "--ttl", "300ms", name)
			if r.code != 0 {
				t.Fatalf("dlock acquire: exit %d: %s", r.code, r.stderr)
			}
			stale := strings.TrimSpace(r.stdout)
			time.Sleep(500 * time.Millisecond)
			p := c.start("run", "--backend", backend, "--no-wait", name, "--", "sh", "-c", "echo holding; exec sleep 30")
			if line := p.line(30 * time.Second); line != "holding" {
				t.Fatalf("the new owner's command printed %q", line)
			}
			for _, verb := range []string{"extend", "release"} {
				if r := c.run(verb, "--backend", backend, stale); r.code != exitLost {
					t.Errorf("dlock %s of a stale handle: exit %d, want %d: %s", verb, r.code, exitLost, r.stderr)
				}
			}
			if r := c.run("run", "--backend", backend, "--no-wait", name, "--", "true"); r.code != exitBusy {
				t.Errorf("the new owner's lock after stale extend and release: exit %d, want busy", r.code)
			}
			p.signal(syscall.SIGTERM)
			p.wait(30 * time.Second)

			if r := c.run("release", "--backend", backend, "dlock1.garbled"); r.code != exitUsage {
				t.Errorf("a garbled handle: exit %d, want %d", r.code, exitUsage)
			}
		})
	}
}

// TestHandleMaxHold: a handle's --max-hold bounds its extensions.
func TestHandleMaxHold(t *testing.T) {
	c := newCLI(t)
	backend := "redis://" + testenv.RedisAddr(t)
	name := uniqueName(t, "handle-max-hold")
	r := c.run("acquire", "--backend", backend, "--ttl", "5s", "--max-hold", "1s", name)
	if r.code != 0 {
		t.Fatalf("dlock acquire: exit %d: %s", r.code, r.stderr)
	}
	h := strings.TrimSpace(r.stdout)
	time.Sleep(1200 * time.Millisecond)
	if r := c.run("extend", "--backend", backend, "--ttl", "5s", h); r.code != exitLost {
		t.Errorf("dlock extend past --max-hold: exit %d, want %d: %s", r.code, exitLost, r.stderr)
	}
	if r := c.run("release", "--backend", backend, h); r.code != 0 {
		t.Errorf("dlock release past --max-hold: exit %d: %s", r.code, r.stderr)
	}
}

// TestAcquireUnsupported: on a backend whose locks cannot outlive their
// process, dlock acquire says so (69) and takes nothing.
func TestAcquireUnsupported(t *testing.T) {
	c := newCLI(t)
	r := c.run("acquire", "--backend", "file://"+t.TempDir(), "job")
	if r.code != exitUnavailable || !strings.Contains(r.stderr, "session, connection or file") || r.stdout != "" {
		t.Errorf("exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}
