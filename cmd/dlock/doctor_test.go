package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/dlockgo/dlock/internal/testenv"
)

// TestDoctor runs dlock doctor as a user would, on a Redis set up well
// and one set up wrong, and checks its lines, JSON and exit statuses: 0
// with warnings only, 1 with a failure, 69 for a store it cannot reach, 64
// for a bad URL.
func TestDoctor(t *testing.T) {
	c := newCLI(t)
	good := testenv.StartRedis(t, testenv.RedisOptions{Persist: true})
	r := c.run("doctor", "redis://"+good.Addr)
	if r.code != 0 {
		t.Fatalf("doctor of a well-configured Redis: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, want := range []string{"ok    maxmemory-policy: noeviction", "ok    persistence: appendonly yes", "ok    role: master", "0 fail\n"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("doctor of a well-configured Redis: no %q in\n%s", want, r.stdout)
		}
	}

	bad := testenv.StartRedis(t, testenv.RedisOptions{Args: []string{"--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru"}})
	r = c.run("doctor", "--ttl", "10s", "redis://"+bad.Addr)
	if r.code != 1 {
		t.Fatalf("doctor of an evicting Redis: exit %d, want 1\n%s%s", r.code, r.stdout, r.stderr)
	}
	var line string
	for l := range strings.Lines(r.stdout) {
		if strings.HasPrefix(l, "fail  maxmemory-policy: allkeys-lru") {
			line = l
		}
	}
	if !strings.Contains(line, "Fix: CONFIG SET maxmemory-policy noeviction") || !strings.Contains(line, "See docs/REDIS.md#eviction") {
		t.Errorf("doctor of an evicting Redis: its line %q lacks the fix or the docs\n%s", line, r.stdout)
	}

	r = c.run("doctor", "--json", "redis://"+bad.Addr)
	var got []doctorEntry
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || r.code != 1 {
		t.Fatalf("doctor --json: exit %d, %v\n%s", r.code, err, r.stdout)
	}
	found := false
	for _, e := range got {
		found = found || e.Check == "maxmemory-policy" && e.Severity == "fail" && e.Doc == "docs/REDIS.md#eviction"
	}
	if !found {
		t.Errorf("doctor --json: no failed maxmemory-policy in %+v", got)
	}

	if r := c.run("doctor", "redis://127.0.0.1:1"); r.code != 69 {
		t.Errorf("doctor of an unreachable Redis: exit %d, want 69\n%s", r.code, r.stderr)
	}
	if r := c.run("doctor", "redis://127.0.0.1:6379?no_such_parameter=1"); r.code != 64 {
		t.Errorf("doctor of a bad URL: exit %d, want 64\n%s", r.code, r.stderr)
	}
}
