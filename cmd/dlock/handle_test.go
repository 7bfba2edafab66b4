package main

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/internal/testenv"
)

// TestHandlePipeline is the pipeline story, each step a process of its
// own: acquire prints a handle; a dlock run of the same name is busy
// (75); renew keeps the lock past its first TTL; release frees it, and
// the next dlock run gets it. A handle used after its TTL ran out, when
// another owner holds the lock, is refused (76) and the owner's lock is
// untouched; a garbled handle, or one given with another backend's URL,
// is a usage error (64).
func TestHandlePipeline(t *testing.T) {
	c := newCLI(t)
	testenv.SetS3Env(t)
	testenv.SetAzureEnv(t)
	gcs := testenv.StartGCS(t)
	gcs.SetEnv(t)
	backends := map[string]string{
		"redis":   "redis://" + testenv.RedisAddr(t),
		"s3":      testenv.StartS3(t).URL("dlock-cli"),
		"azblob":  testenv.StartAzure(t).URL("dlock-cli"),
		"gs":      gcs.URL("dlock-cli"),
		"redlock": "redlock://" + testenv.Addrs(testenv.StartRedisN(t, 3, testenv.RedisOptions{})) + "?node_timeout=50ms",
		// Held by the detached holder:
		"zk":       "zk://" + testenv.ZKAddr(t) + "/dlocktest/cli-" + newID(),
		"etcd":     "etcd://" + testenv.EtcdEndpoints(t)[0] + "/dlocktest-cli-" + newID(),
		"postgres": testenv.PGURL(t),
		"mysql":    testenv.MySQLURL(t),
		"file":     "file://" + t.TempDir(),
	}
	for label, backend := range backends {
		t.Run(label, func(t *testing.T) {
			name := uniqueName(t, "pipeline")
			// The renew comes right after the acquire returns, well
			// within the first TTL (5 s against one CLI start); the
			// check past the first TTL is timed from before the acquire
			// started, so it is past that TTL however slow the machine,
			// and well within the renewal (30 s from the renew).
			start := time.Now()
			r := c.run("acquire", "--backend", backend, "--ttl", "5s", name)
			if r.code != 0 {
				t.Fatalf("dlock acquire: exit %d: %s", r.code, r.stderr)
			}
			h := strings.TrimSpace(r.stdout)
			if strings.Count(r.stdout, "\n") != 1 || !strings.HasPrefix(h, "dlock1.") {
				t.Fatalf("dlock acquire printed %q, want one handle line", r.stdout)
			}
			if ch, err := parseHandle(h); err != nil || (ch.holder == "") != (label == "redis" || label == "redlock" || objectStore(label)) {
				t.Errorf("handle %q: holder %q, %v; want one on the backends whose locks live in a process only", h, ch.holder, err)
			}
			if r := c.runRetrying("renew", "--backend", backend, "--ttl", "30s", h); r.code != 0 {
				t.Fatalf("dlock renew: exit %d: %s", r.code, r.stderr)
			}
			foreign := backends["redis"]
			if label == "redis" {
				foreign = backends["file"]
			}
			for _, verb := range []string{"renew", "release"} {
				if r := c.run(verb, "--backend", foreign, h); r.code != exitUsage {
					t.Errorf("dlock %s with another backend's URL: exit %d, want %d: %s", verb, r.code, exitUsage, r.stderr)
				}
			}
			if r := c.run("status", "--backend", backend, name); r.code == 0 && !strings.Contains(r.stdout, name) {
				t.Errorf("dlock status does not show the acquired lock: %s", r.stdout)
			}
			if r := c.run("run", "--backend", backend, "--no-wait", name, "--", "true"); r.code != exitBusy {
				t.Fatalf("dlock run while acquired: exit %d, want %d: %s", r.code, exitBusy, r.stderr)
			}
			time.Sleep(time.Until(start.Add(5*time.Second + 500*time.Millisecond))) // past the first TTL
			if r := c.run("run", "--backend", backend, "--no-wait", name, "--", "true"); r.code != exitBusy {
				t.Fatalf("dlock run after renew, past the first TTL: exit %d, want %d: %s", r.code, exitBusy, r.stderr)
			}
			if r := c.run("release", "--backend", backend, h); r.code != 0 {
				t.Fatalf("dlock release: exit %d: %s", r.code, r.stderr)
			}
			holderGone(t, h)
			if r := c.run("run", "--backend", backend, "--no-wait", name, "--", "true"); r.code != 0 {
				t.Fatalf("dlock run after release: exit %d: %s", r.code, r.stderr)
			}
			if r := c.run("release", "--backend", backend, h); r.code != exitLost {
				t.Errorf("a second release: exit %d, want %d: %s", r.code, exitLost, r.stderr)
			}

			// A handle past its TTL, the lock another's. An object store
			// counts in whole seconds: its shortest TTL is 2 s, and it may
			// see a lock expire up to 2 s after that.
			ttl, gone := time.Second, 1500*time.Millisecond
			if objectStore(label) {
				ttl, gone = 2*time.Second, 4500*time.Millisecond
			}
			r = c.run("acquire", "--backend", backend, "--ttl", ttl.String(), name)
			if r.code != 0 {
				t.Fatalf("dlock acquire: exit %d: %s", r.code, r.stderr)
			}
			stale := strings.TrimSpace(r.stdout)
			time.Sleep(gone)
			holderGone(t, stale) // it let go at its TTL, without a renew
			p := c.start("run", "--backend", backend, "--no-wait", name, "--", "sh", "-c", "echo holding; exec sleep 30")
			if line := p.line(30 * time.Second); line != "holding" {
				t.Fatalf("the new owner's command printed %q", line)
			}
			for _, verb := range []string{"renew", "release"} {
				if r := c.run(verb, "--backend", backend, stale); r.code != exitLost {
					t.Errorf("dlock %s of a stale handle: exit %d, want %d: %s", verb, r.code, exitLost, r.stderr)
				}
			}
			if r := c.run("run", "--backend", backend, "--no-wait", name, "--", "true"); r.code != exitBusy {
				t.Errorf("the new owner's lock after stale renew and release: exit %d, want busy", r.code)
			}
			p.signal(syscall.SIGTERM)
			p.wait(30 * time.Second)

			if r := c.run("release", "--backend", backend, "dlock1.garbled"); r.code != exitUsage {
				t.Errorf("a garbled handle: exit %d, want %d", r.code, exitUsage)
			}
		})
	}
}

// runRetrying runs dlock as run does, again (up to 3 times in all) while it
// exits 69, the backend unavailable for now: as a script would, since on a
// loaded machine a fresh process's first requests can miss a node timeout
// of 50 ms (redlock's "no quorum").
func (c *cli) runRetrying(args ...string) result {
	c.t.Helper()
	r := c.run(args...)
	for i := 1; i < 3 && r.code == exitUnavailable; i++ {
		c.t.Logf("dlock %s: exit %d, again: %s", args[0], r.code, r.stderr)
		r = c.run(args...)
	}
	return r
}

// TestHandleMaxHold: a handle's --max-hold bounds its renewals on a
// store's own lock (redis) and ends a detached holder on time, which lets
// the lock go and leaves nothing behind (file).
func TestHandleMaxHold(t *testing.T) {
	c := newCLI(t)
	for label, backend := range map[string]string{
		"redis": "redis://" + testenv.RedisAddr(t),
		"file":  "file://" + t.TempDir(),
	} {
		t.Run(label, func(t *testing.T) {
			name := uniqueName(t, "handle-max-hold")
			r := c.run("acquire", "--backend", backend, "--ttl", "10s", "--max-hold", "1s", name)
			if r.code != 0 {
				t.Fatalf("dlock acquire: exit %d: %s", r.code, r.stderr)
			}
			h := strings.TrimSpace(r.stdout)
			time.Sleep(1300 * time.Millisecond)
			if r := c.run("renew", "--backend", backend, "--ttl", "10s", h); r.code != exitLost {
				t.Errorf("dlock renew past --max-hold: exit %d, want %d: %s", r.code, exitLost, r.stderr)
			}
			if label == "file" {
				holderGone(t, h)
				if r := c.run("run", "--backend", backend, "--no-wait", name, "--", "true"); r.code != 0 {
					t.Errorf("dlock run after the holder's --max-hold: exit %d: %s", r.code, r.stderr)
				}
				return
			}
			if r := c.run("release", "--backend", backend, h); r.code != 0 {
				t.Errorf("dlock release past --max-hold: exit %d: %s", r.code, r.stderr)
			}
		})
	}
}

// TestAcquireRuntimeDirChecked: where the detached holder's socket could
// be replaced by another user (a runtime directory open to others), dlock
// acquire refuses to start it (69) and takes nothing.
func TestAcquireRuntimeDirChecked(t *testing.T) {
	c := newCLI(t)
	open := t.TempDir()
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(open+"/dlock", 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open+"/dlock", 0o777); err != nil {
		t.Fatal(err)
	}
	x := c.command("acquire", "--backend", "file://"+t.TempDir(), "job")
	x.Env = append(x.Env, "XDG_RUNTIME_DIR="+open)
	out, err := x.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	}
	if code != exitUnavailable || !strings.Contains(string(out), "open to group or others") {
		t.Errorf("exit %d, output %q: want 69 naming the open directory", code, out)
	}
}

// holderGone checks that the detached holder of handle, if it has one, has
// exited and removed its socket: nothing is left behind.
func holderGone(t *testing.T, handle string) {
	t.Helper()
	h, err := parseHandle(handle)
	if err != nil {
		t.Fatal(err)
	}
	if h.holder == "" {
		return
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, statErr := os.Stat(h.holder)
		out, _ := exec.Command("pgrep", "-f", h.holder).Output()
		if os.IsNotExist(statErr) && len(out) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the holder is not gone: socket %v, processes %q", statErr, out)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The CLI prints the library's handle and a tenth field, its holder's
// socket, as it did when the holder was a field of dlock.Handle: handles
// printed before decode the same, holder included, and a handle without a
// holder is the library's text and a dot. The library's own text (nine
// fields) decodes with no holder.
func TestHandleHolderField(t *testing.T) {
	h := dlock.Handle{Scheme: "zk", Name: "jobs/a", Mode: driver.Read,
		Owner: "0123456789abcdef0123456789abcdef", Token: 7, TTL: 5 * time.Second, Deadline: time.UnixMilli(1796400000000)}
	held := cliHandle{Handle: h, holder: "/run/user/1000/dlock/hold-ab12.sock"}
	stored := cliHandle{Handle: dlock.Handle{Scheme: "redis", Name: "deploy-prod", Mode: driver.Permit, Limit: 3,
		Owner: "fedcba9876543210fedcba9876543210", Token: 42, TTL: 10 * time.Minute}}
	// As dlock acquire printed them before.
	const heldBefore = "dlock1.zk.read.5000.1796400000000.7.0.0123456789abcdef0123456789abcdef.am9icy9h.L3J1bi91c2VyLzEwMDAvZGxvY2svaG9sZC1hYjEyLnNvY2s"
	const storedBefore = "dlock1.redis.permit.600000.0.42.3.fedcba9876543210fedcba9876543210.ZGVwbG95LXByb2Q."
	for _, c := range []struct {
		text string
		want cliHandle
	}{
		{held.String(), held},
		{stored.String(), stored},
		{heldBefore, held},
		{storedBefore + "\n", stored},
		{stored.Handle.String(), stored},
	} {
		if got, err := parseHandle(c.text); err != nil || got != c.want {
			t.Errorf("parseHandle(%q) = %+v, %v; want %+v", c.text, got, err, c.want)
		}
	}
	if held.String() != heldBefore || stored.String() != storedBefore {
		t.Errorf("printed %q and %q, want the handles printed before, %q and %q", held, stored, heldBefore, storedBefore)
	}
	if _, err := parseHandle(stored.Handle.String() + ".not*base64"); !errors.Is(err, dlock.ErrBadHandle) {
		t.Errorf("a garbled holder: %v, want ErrBadHandle", err)
	}
}

// objectStore reports whether the backend labelled label is an object
// store's, whose times are in whole seconds.
func objectStore(label string) bool { return label == "s3" || label == "azblob" || label == "gs" }
