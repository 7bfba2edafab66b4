package redlock

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/dlockgo/dlock/internal/testenv"
)

// TestEvictionWarning: nodes whose maxmemory-policy may evict lock keys
// get one warning naming each of them, the risk and the fix; a Redlock of
// noeviction nodes none; a node that is down only a debug line.
func TestEvictionWarning(t *testing.T) {
	c := newCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	check := func(policies ...string) *testenv.Buffer {
		t.Helper()
		for i, p := range policies {
			if err := c.admin[i].ConfigSet(ctx, "maxmemory-policy", p).Err(); err != nil {
				t.Fatal(err)
			}
		}
		buf := &testenv.Buffer{}
		d, err := NewDriver(c.clients(t), testOptions(&Options{Logger: slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug}))}))
		if err != nil {
			t.Fatal(err)
		}
		d.checking.Wait() // Close would cut the check short
		_ = d.Close()
		return buf
	}

	buf := check("allkeys-lru", "volatile-ttl", "noeviction")
	warns := buf.Lines("WARN")
	if len(warns) != 1 {
		t.Fatalf("warnings %q, want one", warns)
	}
	w := warns[0]
	for _, want := range []string{"2 of 3 nodes", "allkeys-lru on " + c.servers[0].Addr, "volatile-ttl on " + c.servers[1].Addr, "maxmemory-policy noeviction"} {
		if !strings.Contains(w, want) {
			t.Errorf("warning %q does not say %q", w, want)
		}
	}
	if strings.Contains(w, c.servers[2].Addr) {
		t.Errorf("warning %q names the noeviction node %s", w, c.servers[2].Addr)
	}
	t.Log(w)

	if warns := check("noeviction", "noeviction", "noeviction").Lines("WARN"); len(warns) > 0 {
		t.Errorf("noeviction everywhere: warnings %q, want none", warns)
	}

	c.servers[2].Kill()
	buf = check("noeviction", "noeviction")
	if warns := buf.Lines("WARN"); len(warns) > 0 {
		t.Errorf("a node down: warnings %q, want none", warns)
	}
	if dbg := buf.Lines("DEBUG"); len(dbg) != 1 || !strings.Contains(dbg[0], c.servers[2].Addr) {
		t.Errorf("a node down: debug lines %q, want one naming %s", dbg, c.servers[2].Addr)
	}
}
