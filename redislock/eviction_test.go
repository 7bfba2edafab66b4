package redislock

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/internal/testenv"
)

// checkOneWarning fails t unless buf holds exactly one warning, naming the
// policy and the fix, when want; none otherwise.
func checkOneWarning(t *testing.T, how string, buf *testenv.Buffer, policy string, want bool) {
	t.Helper()
	warns := buf.Lines("WARN")
	switch {
	case !want && len(warns) > 0:
		t.Errorf("%s, maxmemory-policy %s: warned %q, want no warning", how, policy, warns)
	case want && len(warns) != 1:
		t.Errorf("%s, maxmemory-policy %s: %d warnings %q, want one", how, policy, len(warns), warns)
	case want && !(strings.Contains(warns[0], policy) && strings.Contains(warns[0], "evict") &&
		strings.Contains(warns[0], "maxmemory-policy noeviction")):
		t.Errorf("%s: warning %q does not name the policy %s, the risk and the fix", how, warns[0], policy)
	case want:
		t.Logf("%s: %s", how, warns[0])
	}
}

// TestEvictionWarning: a server whose maxmemory-policy may evict lock keys
// gets one warning through the driver's logger, at NewDriver (in the
// background) and at dlock.Open (before Open returns, on the logger of
// dlock.WithLogger, or slog.Default without one); noeviction gets none, and a server that refuses CONFIG
// GET only a debug line.
func TestEvictionWarning(t *testing.T) {
	srv := testenv.StartRedis(t, testenv.RedisOptions{})
	admin := srv.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, c := range []struct {
		policy string
		warn   bool
	}{
		{"allkeys-lru", true},
		{"volatile-lru", true}, // lock keys have a TTL: volatile-* evicts them too
		{"noeviction", false},
	} {
		t.Run(c.policy, func(t *testing.T) {
			// As redis-server --maxmemory-policy would set it at start.
			if err := admin.ConfigSet(ctx, "maxmemory-policy", c.policy).Err(); err != nil {
				t.Fatal(err)
			}
			buf, log := testenv.NewLogger()
			d := NewDriver(srv.Client(), &Options{Logger: log})
			d.checking.Wait() // Close would cut the check short
			_ = d.Close()
			checkOneWarning(t, "NewDriver", buf, c.policy, c.warn)

			buf, log = testenv.NewLogger()
			prev := slog.Default()
			slog.SetDefault(log)
			l, err := dlock.Open(ctx, "redis://"+srv.Addr)
			slog.SetDefault(prev)
			if err != nil {
				t.Fatal(err)
			}
			checkOneWarning(t, "dlock.Open", buf, c.policy, c.warn)
			_ = l.Close()

			// With dlock.WithLogger, the warning goes there, not to
			// slog.Default.
			buf, log = testenv.NewLogger()
			_, other := testenv.NewLogger()
			slog.SetDefault(other)
			l, err = dlock.Open(ctx, "redis://"+srv.Addr, dlock.WithLogger(log))
			slog.SetDefault(prev)
			if err != nil {
				t.Fatal(err)
			}
			checkOneWarning(t, "dlock.Open with WithLogger", buf, c.policy, c.warn)
			_ = l.Close()
		})
	}

	// A user the ACL denies CONFIG, as managed services deny it: no
	// warning, one debug line saying the check was skipped.
	if err := admin.ConfigSet(ctx, "maxmemory-policy", "allkeys-lru").Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.Do(ctx, "ACL", "SETUSER", "noconfig", "on", ">pw", "~*", "&*", "+@all", "-config").Err(); err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: "noconfig", Password: "pw"})
	defer c.Close()
	buf, log := testenv.NewLogger()
	d := NewDriver(c, &Options{Logger: log})
	d.checking.Wait()
	_ = d.Close()
	checkOneWarning(t, "CONFIG denied", buf, "allkeys-lru", false)
	if dbg := buf.Lines("DEBUG"); len(dbg) != 1 || !strings.Contains(dbg[0], "maxmemory-policy") {
		t.Errorf("CONFIG denied: debug lines %q, want one saying the policy could not be read", dbg)
	}
}

// TestSlogLogger: go-redis's messages, passed through SlogLogger, reach
// the slog.Logger at the level chosen, and not below the logger's level.
func TestSlogLogger(t *testing.T) {
	buf, log := testenv.NewLogger()
	g := SlogLogger(log, slog.LevelDebug)
	g.Printf(context.Background(), "failed to dial %s: %v", "127.0.0.1:1", "connection refused")
	got := buf.Lines("DEBUG")
	if len(got) != 1 || !strings.Contains(got[0], "failed to dial 127.0.0.1:1: connection refused") || !strings.Contains(got[0], "logger=go-redis") {
		t.Errorf("debug lines %q, want the formatted message with logger=go-redis", got)
	}
	var quiet bytes.Buffer
	SlogLogger(slog.New(slog.NewTextHandler(&quiet, nil)), slog.LevelDebug).Printf(context.Background(), "noise %d", 1)
	if quiet.Len() > 0 {
		t.Errorf("a message below the logger's level was written: %q", quiet.String())
	}
}
