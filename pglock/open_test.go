package pglock_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/pglock"
)

// testURL returns the test server's URL with the query parameters kv (pairs)
// added, and with scheme if not empty.
func testURL(t *testing.T, scheme string, kv ...string) string {
	t.Helper()
	u, err := url.Parse(testenv.PGURL(t))
	if err != nil {
		t.Fatal(err)
	}
	if scheme != "" {
		u.Scheme = scheme
	}
	q := u.Query()
	for i := 0; i+1 < len(kv); i += 2 {
		q.Set(kv[i], kv[i+1])
	}
	u.RawQuery = q.Encode()
	return u.String()
}

func TestOpen(t *testing.T) {
	ctx := testContext(t, 30*time.Second)
	adm := newAdmin(t)
	app := "pglock-open-" + randomHex(4)
	for _, scheme := range []string{"postgres", "postgresql"} {
		l, err := dlock.Open(ctx, testURL(t, scheme,
			"table", table, "keepalive", "2s", "max_idle", "1", "migrate", "true", "ttl", "5s", "renew", "false",
			"application_name", app, "search_path", "public", "tcp_keepalives_count", "7",
			"options", "-c statement_timeout=4321"))
		if err != nil {
			t.Fatalf("%s: %v", scheme, err)
		}
		d, ok := l.Driver().(*pglock.Driver)
		if !ok {
			t.Fatalf("%s: driver is %T", scheme, l.Driver())
		}
		if d.Scheme() != "postgres" || d.Table() != table {
			t.Errorf("%s: Scheme() = %q, Table() = %q", scheme, d.Scheme(), d.Table())
		}
		lease, err := l.Acquire(ctx, "open/"+randomHex(4))
		if err != nil {
			t.Fatal(err)
		}
		if lease.TTL() != 5*time.Second {
			t.Errorf("%s: lease TTL %v, want the URL's 5s", scheme, lease.TTL())
		}
		var n int
		adm.mu.Lock()
		err = adm.c.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", app).Scan(&n)
		adm.mu.Unlock()
		if err != nil || n == 0 {
			t.Errorf("%s: %d sessions with the URL's application_name (%v), want some", scheme, n, err)
		}
		for setting, want := range map[string]string{
			"tcp_keepalives_idle":              "2",      // from keepalive=2s
			"client_connection_check_interval": "2s",     // from keepalive=2s
			"tcp_keepalives_count":             "7",      // the URL's own, kept
			"search_path":                      "public", // a run-time setting passed through
			"statement_timeout":                "4321ms", // options, whose space must reach pgx as one
		} {
			if got, err := pglock.Setting(ctx, d, setting); err != nil || got != want {
				t.Errorf("%s: %s = %q (%v), want %q", scheme, setting, got, err, want)
			}
		}
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if n := pglock.Idle(d); n != 1 {
			t.Errorf("%s: %d idle connections, want max_idle=1", scheme, n)
		}
		_ = l.Close()
	}
}

func TestOpenErrors(t *testing.T) {
	ctx := testContext(t, 30*time.Second)
	for _, c := range []struct{ kv []string }{
		{[]string{"table", "Bad-Table"}},
		{[]string{"table", "a.b.c"}},
		{[]string{"keepalive", "soon"}},
		{[]string{"keepalive", "1ms"}},
		{[]string{"keepalive", "-1s"}},
		{[]string{"max_idle", "-1"}},
		{[]string{"max_idle", "many"}},
		{[]string{"session_locks", "0"}},
		{[]string{"session_locks", "lots"}},
		{[]string{"migrate", "maybe"}},
		{[]string{"server_keepalive", "sometimes"}},
		{[]string{"colour", "red"}},                  // neither ours, nor pgx's, nor the server's
		{[]string{"statement_timeout", "whenever"}},  // the server's, with a bad value
		{[]string{"sslmode", "bogus"}},               // pgx's, with a bad value
		{[]string{"connect_timeout", "x"}},           // pgx's, with a bad value
		{[]string{"default_query_exec_mode", "odd"}}, // pgx's, with a bad value
	} {
		raw := testURL(t, "", c.kv...)
		l, err := dlock.Open(ctx, raw)
		if err == nil {
			_ = l.Close()
		}
		pe, ok := errors.AsType[*dlock.ParamError](err)
		if !ok || pe.Param != c.kv[0] {
			t.Errorf("Open(%q) = %v, want a *ParamError naming %q", raw, err, c.kv[0])
			continue
		}
		if strings.Contains(err.Error(), "password") {
			t.Errorf("error mentions a password: %v", err)
		}
	}
}

// TestNoMigrate: with migrate=false the driver creates nothing; taking a
// lock on a missing table says how to fix it; Migrate creates the table.
func TestNoMigrate(t *testing.T) {
	ctx := testContext(t, 30*time.Second)
	tbl := "pglock_nomigrate_" + randomHex(4)
	t.Cleanup(func() { _ = dropTable(tbl) })
	l, err := dlock.Open(ctx, testURL(t, "", "table", tbl, "migrate", "false"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, err = l.TryAcquire(ctx, "x")
	if err == nil || !strings.Contains(err.Error(), "Migrate") {
		t.Fatalf("TryAcquire without the table = %v, want an error pointing to Migrate", err)
	}
	d := l.Driver().(*pglock.Driver)
	for range 2 { // idempotent
		if err := d.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
	}
	lease, err := l.TryAcquire(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	_ = lease.Release(ctx)
}

// TestConcurrentMigrate: drivers created at once on a new table all
// succeed: migrations of one table run one after the other.
func TestConcurrentMigrate(t *testing.T) {
	tbl := "pglock_migrate_" + randomHex(4)
	t.Cleanup(func() { _ = dropTable(tbl) })
	cfg := config(t)
	errc := make(chan error, 6)
	for range cap(errc) {
		go func() {
			d, err := pglock.NewDriver(context.Background(), cfg, &pglock.Options{Table: tbl})
			if err == nil {
				_ = d.Close()
			}
			errc <- err
		}()
	}
	for range cap(errc) {
		if err := <-errc; err != nil {
			t.Error(err)
		}
	}
}

func TestNewDriverErrors(t *testing.T) {
	ctx := context.Background()
	if _, err := pglock.NewDriver(ctx, nil, nil); err == nil {
		t.Error("NewDriver(nil config) succeeded")
	}
	if _, err := pglock.NewDriver(ctx, config(t), &pglock.Options{Keepalive: time.Millisecond}); err == nil {
		t.Error("NewDriver with a 1ms keep-alive succeeded")
	}
	cfg := config(t)
	cfg.Port = 1 // nothing listens there
	cfg.ConnectTimeout = time.Second
	if _, err := pglock.NewDriver(ctx, cfg, nil); err == nil {
		t.Error("NewDriver against a closed port succeeded")
	}
}

// TestOpenSilentServer: Open against a server that accepts the connection
// and never answers fails: at the context's deadline, at the URL's
// connect_timeout with context.Background, and at the default connect
// timeout (shortened here) when the URL sets none.
func TestOpenSilentServer(t *testing.T) {
	addr := testenv.SilentServer(t)
	base := "postgres://postgres@" + addr + "/test?sslmode=disable"
	for _, c := range []struct {
		what    string
		url     string
		ctx     time.Duration // 0: context.Background
		def     time.Duration // the default connect timeout during the test
		atLeast time.Duration
	}{
		// The default connect timeout is a minute where another bound
		// must end the wait: only that bound can end it within the hang
		// bound below.
		{"context deadline", base, 300 * time.Millisecond, time.Minute, 300 * time.Millisecond},
		{"connect_timeout=1", base + "&connect_timeout=1", 0, time.Minute, time.Second},
		{"default", base, 0, 500 * time.Millisecond, 500 * time.Millisecond},
	} {
		t.Run(c.what, func(t *testing.T) {
			defer pglock.SetDefaultConnectTimeout(c.def)()
			start := time.Now() // before any bound starts: none can end before atLeast
			ctx := context.Background()
			if c.ctx > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, c.ctx)
				defer cancel()
			}
			done := make(chan error, 1)
			go func() {
				l, err := dlock.Open(ctx, c.url)
				if err == nil {
					_ = l.Close()
				}
				done <- err
			}()
			var err error
			select {
			case err = <-done:
			case <-time.After(10*c.atLeast + 5*time.Second):
				t.Fatalf("Open still blocked %v after it started", time.Since(start))
			}
			took := time.Since(start)
			t.Logf("Open failed after %v: %v", took, err)
			if err == nil {
				t.Fatal("Open of a silent server succeeded")
			}
			// Not before the bound; after it, a hang bound of 10×.
			if took < c.atLeast || took > 10*c.atLeast {
				t.Errorf("Open failed after %v, want it at %v (and before 10× that)", took, c.atLeast)
			}
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("Open error %q does not match DeadlineExceeded", err)
			}
			if c.ctx == 0 && !strings.Contains(err.Error(), "connect timeout") {
				t.Errorf("Open error %q does not name the connect timeout", err)
			}
		})
	}
}

// TestDefaultConnectTimeout: a driver whose configuration sets no connect
// timeout gets DefaultConnectTimeout; one from a URL with connect_timeout
// keeps it.
func TestDefaultConnectTimeout(t *testing.T) {
	ctx := testContext(t, 20*time.Second)
	cfg := config(t)
	cfg.ConnectTimeout = 0
	d, err := pglock.NewDriver(ctx, cfg, &pglock.Options{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if got := pglock.ConnectTimeout(d); got != pglock.DefaultConnectTimeout {
		t.Errorf("connect timeout %v with none configured, want %v", got, pglock.DefaultConnectTimeout)
	}
	for _, c := range []struct {
		kv   []string
		want time.Duration
	}{
		{nil, pglock.DefaultConnectTimeout},
		{[]string{"connect_timeout", "3"}, 3 * time.Second},
	} {
		l, err := dlock.Open(ctx, testURL(t, "", append([]string{"table", table}, c.kv...)...))
		if err != nil {
			t.Fatal(err)
		}
		if got := pglock.ConnectTimeout(l.Driver().(*pglock.Driver)); got != c.want {
			t.Errorf("URL with %v: connect timeout %v, want %v", c.kv, got, c.want)
		}
		_ = l.Close()
	}
}
