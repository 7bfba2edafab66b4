package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/filelock"
	"github.com/dlockgo/dlock/internal/testenv"
)

// TestStatusFileBackend holds a lock with dlock run and reads it back
// with dlock status: the same token the command got, and dlock's pid as
// the holder.
func TestStatusFileBackend(t *testing.T) {
	c := newCLI(t)
	name := uniqueName(t, "status/held")
	holder := c.start("run", name, "--", "sh", "-c", `echo "$$ $DLOCK_TOKEN"; exec sleep 30`)
	var pid int
	var token uint64
	if _, err := fmt.Sscan(holder.line(30*time.Second), &pid, &token); err != nil {
		t.Fatalf("the command printed no pid and token: %v", err)
	}

	r := c.run("status", "--json", "status/")
	if r.code != 0 {
		t.Fatalf("dlock status --json: exit %d: %s", r.code, r.stderr)
	}
	var got []statusEntry
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("status --json output %q: %v", r.stdout, err)
	}
	if len(got) != 1 || got[0].Name != name || got[0].Token != token ||
		got[0].Owner != fmt.Sprint("pid ", holder.cmd.Process.Pid) || got[0].Mode != "exclusive" {
		t.Fatalf("status --json = %+v; want one lock %q, token %d, owner pid %d", got, name, token, holder.cmd.Process.Pid)
	}
	if got[0].Waiters != nil || got[0].TTLMs != nil {
		t.Errorf("a flock has no TTL and its waiters are unknown; got %+v", got[0])
	}

	r = c.run("status", name)
	if r.code != 0 || !strings.Contains(r.stdout, "NAME") || !strings.Contains(r.stdout, name) || !strings.Contains(r.stdout, fmt.Sprint(token)) {
		t.Fatalf("dlock status table: exit %d, %q", r.code, r.stdout)
	}
	if r := c.run("status", "no-such-prefix/"); r.code != 0 || !strings.Contains(r.stdout, "no locks held") {
		t.Fatalf("dlock status of an empty prefix: exit %d, %q", r.code, r.stdout)
	}

	// dlock killed outright: its command dies with it (it would run
	// without the lock otherwise), and the flock is gone with the process.
	holder.signal(syscall.SIGKILL)
	holder.wait(10 * time.Second)
	deadline := time.Now().Add(5 * time.Second)
	for !processGone(pid) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("the command (pid %d) outlived dlock killed by SIGKILL", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
	r = c.run("status", "--json")
	if r.code != 0 || strings.TrimSpace(r.stdout) != "[]" {
		t.Fatalf("status after the holder died: exit %d, %q; want []", r.code, r.stdout)
	}
}

// TestInspectInProcess checks the file backend's Inspector directly: a
// lock held through the same Driver reports its owner value; a released
// one is not listed; prefixes filter.
func TestInspectInProcess(t *testing.T) {
	ctx := context.Background()
	l, err := dlock.Open(ctx, "file://"+t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	acquire := func(name string) *dlock.Lease {
		lease, err := l.Acquire(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		return lease
	}
	a, b := acquire("orders/1"), acquire("other")
	if err := acquire("orders/2").Release(ctx); err != nil {
		t.Fatal(err)
	}
	var insp driver.Inspector = l.Driver().(*filelock.Driver)
	got, err := insp.Inspect(ctx, "orders/")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Name != "orders/1" || got[0].Token != a.Token() || got[0].Owner != a.Owner() || got[0].Waiters != -1 {
		t.Fatalf("Inspect(orders/) = %+v; want only orders/1 with token %d, owner %s", got, a.Token(), a.Owner())
	}
	all, err := insp.Inspect(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 2 || all[0].Name != "orders/1" || all[1].Name != "other" || all[1].Token != b.Token() {
		t.Fatalf("Inspect(\"\") = %+v; want orders/1 and other, sorted", all)
	}
}

// TestStatusRedisCluster: dlock status on a redis+cluster:// URL lists
// the locks of every primary, with their tokens.
func TestStatusRedisCluster(t *testing.T) {
	cs := testenv.StartRedisCluster(t, testenv.ClusterOptions{})
	rawURL := "redis+cluster://" + strings.Join(cs.Addrs()[:3], ",")
	ctx := t.Context()
	l, err := dlock.Open(ctx, rawURL)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	admin := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cs.Addrs()})
	defer admin.Close()
	want := map[string]uint64{}
	primaries := map[string]bool{}
	for i := 0; len(primaries) < 3 || len(want) < 6; i++ {
		if i == 100 {
			t.Fatalf("100 names on %d primaries only", len(primaries))
		}
		name := fmt.Sprintf("status/cluster-%d", i)
		lease, err := l.Acquire(ctx, name, dlock.WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		defer lease.Release(context.Background())
		want[name] = lease.Token()
		if m, err := admin.MasterForKey(ctx, "dlock:{"+name+"}"); err == nil {
			primaries[m.Options().Addr] = true
		}
	}
	r := newCLI(t).run("status", "--json", "--backend", rawURL, "status/")
	if r.code != 0 {
		t.Fatalf("dlock status --json: exit %d: %s", r.code, r.stderr)
	}
	var got []statusEntry
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("status --json output %q: %v", r.stdout, err)
	}
	seen := map[string]uint64{}
	for _, e := range got {
		seen[e.Name] = e.Token
	}
	if len(seen) != len(want) {
		t.Errorf("status lists %d locks, want %d (held on %d primaries): %+v", len(seen), len(want), len(primaries), got)
	}
	for name, tok := range want {
		if seen[name] != tok {
			t.Errorf("status: %s token %d, want %d", name, seen[name], tok)
		}
	}
}
