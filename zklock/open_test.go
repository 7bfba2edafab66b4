package zklock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/locktest"
	"github.com/dlockgo/dlock/zklock"
)

func TestOpen(t *testing.T) {
	ctx := locktest.Context(t, 30*time.Second)
	addr := testenv.ZKAddr(t)
	prefix := testPrefix()
	l, err := dlock.Open(ctx, "zk://"+addr+","+addr+prefix+"?session_timeout=3s&ttl=5s")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	d, ok := l.Driver().(*zklock.Driver)
	if !ok {
		t.Fatalf("driver is %T", l.Driver())
	}
	if d.Prefix() != prefix {
		t.Errorf("Prefix() = %q, want %q", d.Prefix(), prefix)
	}
	lease := locktest.Must(t)(l.Acquire(ctx, "open"))
	if _, granted, _ := d.SessionInfo(); granted != 3*time.Second {
		t.Errorf("granted session timeout %v, want the URL's 3s", granted)
	}
	if !lease.Expires().IsZero() {
		t.Errorf("Expires() = %v, want zero: the lock lives as long as the session", lease.Expires())
	}
	adm := newAdmin(t, []string{addr})
	if n := len(adm.locks(prefix, "open")); n != 1 {
		t.Errorf("%d lock nodes under the URL's prefix, want 1", n)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestOpenErrors(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct{ url, param string }{
		{"zk://127.0.0.1:21810/x?colour=red", "colour"},
		{"zk://127.0.0.1:21810/x?session_timeout=soon", "session_timeout"},
		{"zk://127.0.0.1:21810/x?session_timeout=1ms", "session_timeout"},
		{"zk:///x", "host"},
		{"zk://,127.0.0.1:21810/x", "host"},
		{"zk://user@127.0.0.1:21810/x", "userinfo"},
		{"zk://127.0.0.1:21810/x?acl=nobody", "acl"},
		{"zk://127.0.0.1:21810/x?cacert=/etc/ca.pem", "cacert"},
		{"zk://127.0.0.1:21810/zookeeper", "path"},
		{"zk://127.0.0.1:21810/zookeeper/quota", "path"},
		{"zk://127.0.0.1:21810/a//b", "path"},
		{"zk://127.0.0.1:21810/a/../b", "path"},
		{"zk://127.0.0.1:21810/a%20b", "path"},
	} {
		locktest.OpenFails(t, ctx, c.url, c.param)
	}
}

func TestNewDriverErrors(t *testing.T) {
	for _, c := range []struct {
		servers []string
		o       zklock.Options
	}{
		{nil, zklock.Options{}},
		{[]string{""}, zklock.Options{}},
		{[]string{"127.0.0.1:21810"}, zklock.Options{Prefix: "/"}},
		{[]string{"127.0.0.1:21810"}, zklock.Options{Prefix: "dlock"}},
		{[]string{"127.0.0.1:21810"}, zklock.Options{Prefix: "/a/"}},
		{[]string{"127.0.0.1:21810"}, zklock.Options{SessionTimeout: time.Millisecond}},
	} {
		d, err := zklock.NewDriver(c.servers, &c.o)
		if err == nil {
			_ = d.Close()
			t.Errorf("NewDriver(%q, %+v) succeeded", c.servers, c.o)
		}
	}
}

// TestDefaults: a server without a port gets the default port, and a URL
// without a path the default prefix.
func TestDefaults(t *testing.T) {
	l, err := dlock.Open(context.Background(), "zk://127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if p := l.Driver().(*zklock.Driver).Prefix(); p != zklock.DefaultPrefix {
		t.Errorf("Prefix() = %q, want %q", p, zklock.DefaultPrefix)
	}
}

// TestClosedDriver: after Close, calls fail with ErrClosed.
func TestClosedDriver(t *testing.T) {
	ctx := context.Background()
	l, err := zklock.New([]string{testenv.ZKAddr(t)}, &zklock.Options{Prefix: testPrefix()})
	if err != nil {
		t.Fatal(err)
	}
	lease := locktest.Must(t)(l.Acquire(ctx, "closed"))
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(lease.Err(), dlock.ErrReleased) {
		t.Errorf("after Close, Err() = %v, want ErrReleased", lease.Err())
	}
	if _, err := l.Driver().TryLock(ctx, driver.Request{Name: "closed", Owner: "0123456789abcdef0123456789abcdef", TTL: time.Second}); !errors.Is(err, dlock.ErrClosed) {
		t.Errorf("TryLock after Close = %v, want ErrClosed", err)
	}
}

// TestOpenTLSToPlainServer: tls=true to a plain ZooKeeper says that the
// server does not speak TLS, not only that no server could be reached,
// and soon (a refused or dropped connection is reported after one pass
// over the servers; the bound is a hang bound).
func TestOpenTLSToPlainServer(t *testing.T) {
	addr := testenv.ZKAddr(t)
	start := time.Now()
	l, err := dlock.Open(context.Background(), "zk://"+addr+"/x?tls=true&insecure_skip_verify=true")
	if err == nil {
		_ = l.Close()
		t.Fatal("Open succeeded")
	}
	t.Logf("%v (after %v)", err, time.Since(start))
	if !strings.Contains(err.Error(), "the server at "+addr+" does not speak TLS (leave out tls=true)") {
		t.Errorf("error %q does not say that the server does not speak TLS", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("Open took %v, more than 1s", took)
	}
}

const pkgPath = "github.com/dlockgo/dlock/zklock"

// TestCloseLeavesNoGoroutine: once Close returns, none of the driver's
// goroutines is left: the session's (its monitor, the close of its
// connection), the watch of a held node, an acquisition given up.
func TestCloseLeavesNoGoroutine(t *testing.T) {
	ctx := locktest.Context(t, 60*time.Second)
	servers := []string{testenv.ZKAddr(t)}
	for i := range 5 {
		before := testenv.Goroutines(pkgPath)
		l, _ := newLocker(t, servers, testPrefix(), 0)
		locktest.Must(t)(l.Acquire(ctx, "close"))
		// A second lock contends with the first: its acquisition watches
		// the holder's node until its context ends.
		wctx, wcancel := context.WithTimeout(ctx, 50*time.Millisecond)
		_, err := l.Acquire(wctx, "close")
		wcancel()
		if err == nil {
			t.Fatal("a second Acquire of a held lock succeeded")
		}
		if err := l.Close(); err != nil {
			t.Fatalf("run %d: Close: %v", i, err)
		}
		if left := testenv.NewGoroutines(before, pkgPath); left != "" {
			t.Fatalf("run %d: goroutines of the driver left after Close:\n%s", i, left)
		}
	}
}
