package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/dlockgo/dlock"

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

// TestDoctorEveryBackend runs dlock doctor on every backend's test
// server, by URL as a user would: each answers with a line per check and
// a summary, and none of these servers, set up as the tests use them,
// fails a check (warnings, such as a standalone ZooKeeper's, may come).
func TestDoctorEveryBackend(t *testing.T) {
	c := newCLI(t)
	ps := testenv.StartSentinel(t, testenv.SentinelOptions{})
	cs := testenv.StartRedisCluster(t, testenv.ClusterOptions{})
	a := cs.Addrs()
	nats := "nats://" + testenv.StartNATS(t, 1).URL() + "/dlock-doctor"
	// doctor opens with create=false: the bucket is the clients'.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, err := dlock.Open(ctx, nats)
	if err != nil {
		t.Fatal(err)
	}
	_ = l.Close()
	testenv.SetS3Env(t)
	testenv.SetAzureEnv(t)
	gcs := testenv.StartGCS(t)
	gcs.SetEnv(t)
	urls := map[string]string{
		"file":           "file://" + t.TempDir(),
		"redis":          "redis://" + testenv.RedisAddr(t),
		"redis-sentinel": "redis+sentinel://" + strings.Join(ps.SentinelAddrs(), ",") + "?master_name=" + testenv.SentinelMaster,
		"redis-cluster":  "redis+cluster://" + a[0] + "?addr=" + a[1] + "&addr=" + a[2],
		"redlock":        "redlock://" + testenv.Addrs(testenv.StartRedisN(t, 3, testenv.RedisOptions{Persist: true})),
		"postgres":       testenv.PGURL(t),
		"mysql":          testenv.MySQLURL(t),
		"zk":             "zk://" + testenv.ZKAddr(t) + "/dlock-doctor",
		"etcd":           "etcd://" + strings.Join(testenv.EtcdEndpoints(t), ","),
		"nats":           nats,
		"s3":             testenv.StartS3(t).URL("dlock-doctor"),
		"azblob":         testenv.StartAzure(t).URL("dlock-doctor"),
		"gs":             gcs.URL("dlock-doctor"),
	}
	for label, u := range urls {
		t.Run(label, func(t *testing.T) {
			r := c.run("doctor", u)
			lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
			if r.code != 0 || len(lines) < 3 || !strings.HasSuffix(lines[len(lines)-1], " 0 fail") {
				t.Fatalf("dlock doctor %s: exit %d\n%s%s", label, r.code, r.stdout, r.stderr)
			}
			for _, l := range lines[:len(lines)-1] {
				if !strings.HasPrefix(l, "ok    ") && !strings.HasPrefix(l, "warn  ") {
					t.Errorf("dlock doctor %s: a line that is neither ok nor warn: %q", label, l)
				}
			}
			t.Logf("dlock doctor %s:\n%s", label, r.stdout)
		})
	}
}
