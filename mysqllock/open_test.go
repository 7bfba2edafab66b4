package mysqllock_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/locktest"
	"github.com/dlockgo/dlock/mysqllock"
)

// serverURL returns the mysql:// URL of the test server, with the query
// query.
func serverURL(t testing.TB, query string) string {
	t.Helper()
	cfg, err := testenv.MySQLConfig(testenv.MySQLDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Net != "tcp" {
		t.Fatalf("the URL tests need a TCP address in DLOCK_MYSQL_DSN, not %s", cfg.Net)
	}
	user := cfg.User
	if cfg.Passwd != "" {
		user += ":" + cfg.Passwd
	}
	return "mysql://" + user + "@" + cfg.Addr + "/" + cfg.DBName + "?" + query
}

func TestOpen(t *testing.T) {
	ctx := testContext(t, 30*time.Second)
	table := testTable(t)
	l, err := dlock.Open(ctx, serverURL(t, "table="+table+"&keepalive=150ms&prefix=myapp:&wait_step=5s&timeout=3s&charset=utf8mb4&ttl=5s"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	d, ok := l.Driver().(*mysqllock.Driver)
	if !ok {
		t.Fatalf("driver is %T", l.Driver())
	}
	if d.Table() != table || d.Prefix() != "myapp:" || d.KeepAlive() != 150*time.Millisecond || d.WaitStep() != 5*time.Second {
		t.Errorf("table %q prefix %q keepalive %v wait step %v, want the URL's", d.Table(), d.Prefix(), d.KeepAlive(), d.WaitStep())
	}
	if got := d.LockName("orders/42"); got != "myapp:orders/42" {
		t.Errorf("LockName = %q, want myapp:orders/42", got)
	}
	lease, err := l.Acquire(ctx, "orders/42")
	if err != nil {
		t.Fatal(err)
	}
	if lease.TTL() != 5*time.Second {
		t.Errorf("TTL() = %v, want the URL's 5s", lease.TTL())
	}
	if !lease.Expires().IsZero() {
		t.Errorf("Expires() = %v, want zero: the lock lives as long as its connection", lease.Expires())
	}
	if id := newAdmin(t).holder("myapp:orders/42"); id == 0 {
		t.Error("the server does not show myapp:orders/42 held")
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestOpenDefaults: the default table and prefix, and a wait step that
// stays below the DSN's readTimeout.
func TestOpenDefaults(t *testing.T) {
	ctx := testContext(t, 30*time.Second)
	l, err := dlock.Open(ctx, serverURL(t, "readTimeout=4s"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	d := l.Driver().(*mysqllock.Driver)
	if d.Table() != mysqllock.DefaultTable || d.Prefix() != mysqllock.DefaultPrefix || d.KeepAlive() != mysqllock.DefaultKeepAlive {
		t.Errorf("table %q prefix %q keepalive %v, want the defaults", d.Table(), d.Prefix(), d.KeepAlive())
	}
	if d.WaitStep() != 2*time.Second {
		t.Errorf("wait step %v with readTimeout=4s, want 2s", d.WaitStep())
	}
	l2, err := dlock.Open(ctx, serverURL(t, "prefix="))
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	if got := l2.Driver().(*mysqllock.Driver).LockName("a"); got != "a" {
		t.Errorf("LockName with an empty prefix = %q, want a", got)
	}
}

func TestOpenErrors(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct{ url, param string }{
		{"mysql://127.0.0.1/test?colour=red", "colour"},
		{"mysql://127.0.0.1/test?multiStatements=true", "multiStatements"},
		{"mysql://127.0.0.1/test?allowAllFiles=true", "allowAllFiles"},
		{"mysql://127.0.0.1/test?sql_mode=ANSI", "sql_mode"},
		{"mysql://127.0.0.1/test?keepalive=soon", "keepalive"},
		{"mysql://127.0.0.1/test?keepalive=0s", "keepalive"},
		{"mysql://127.0.0.1/test?wait_step=10ms", "wait_step"},
		{"mysql://127.0.0.1/test?session_locks=0", "session_locks"},
		{"mysql://127.0.0.1/test?session_locks=lots", "session_locks"},
		{"mysql://127.0.0.1/test?table=a.b.c", "table"},
		{"mysql://127.0.0.1/test?table=bad-name", "table"},
		{"mysql://127.0.0.1/test?prefix=Upper:", "prefix"},
		{"mysql://127.0.0.1/test?prefix=a%23b", "prefix"},
		{"mysql://127.0.0.1/test?prefix=" + strings.Repeat("p", mysqllock.MaxPrefixLen+1), "prefix"},
		{"mysql://127.0.0.1/test?timeout=soon", "timeout"},
		{"mysql://127.0.0.1/test?tls=nonesuch", "tls"},
		{"mysql://127.0.0.1/test?socket=/tmp/x.sock", "socket"},
		{"mysql://127.0.0.1/a/b", "path"},
		{"mysql://127.0.0.1/", "path"},
		{"mysql://127.0.0.1", "path"},
		{"mysql://127.0.0.1/test?ttl=1ms", "ttl"},
	} {
		locktest.OpenFails(t, ctx, c.url, c.param)
	}
}

// TestOpenNoServer: a URL whose server does not answer fails Open, not the
// first Acquire.
func TestOpenNoServer(t *testing.T) {
	ctx := testContext(t, 30*time.Second)
	l, err := dlock.Open(ctx, "mysql://root@127.0.0.1:1/test?timeout=500ms")
	if err == nil {
		_ = l.Close()
		t.Fatal("Open of a closed port succeeded")
	}
	if !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Errorf("Open error %q does not name the address", err)
	}
}

func TestNewDriverErrors(t *testing.T) {
	db := newDB(t, nil)
	for _, o := range []mysqllock.Options{
		{Table: "x;y"},
		{Table: "`x`"},
		{Prefix: "dlock#"},
		{Prefix: "Dlock:"},
		{KeepAlive: -time.Second},
		{WaitStep: 10 * time.Millisecond},
	} {
		if d, err := mysqllock.NewDriver(db, &o); err == nil {
			_ = d.Close()
			t.Errorf("NewDriver(%+v) succeeded", o)
		}
	}
}
