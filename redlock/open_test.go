package redlock

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/locktest"
)

// Nothing listens on these: the opener dials nothing, so they do for
// checking parameters.
const nodes3 = "127.0.0.1:1,127.0.0.1:2,127.0.0.1:3"

func TestOpenBadURL(t *testing.T) {
	for _, tc := range []struct {
		url, param string
	}{
		{"redlock://", "host"},
		{"redlock:///", "host"},
		{"redlock://127.0.0.1:1,,127.0.0.1:2", "host"},
		{"redlock://127.0.0.1:abc,127.0.0.1:2", "host"},
		{"redlock://127.0.0.1:0,127.0.0.1:2", "host"},
		{"redlock://127.0.0.1:1,127.0.0.1:99999", "host"},
		{"redlock://127.0.0.1:,127.0.0.1:2", "host"},
		{"redlock://:1,127.0.0.1:2", "host"},
		{"redlock://127.0.0.1:1,127.0.0.1:1", "host"},
		{"redlock://h1,h2,h1:6379", "host"},
		{"redlock://127.0.0.1:1,127.0.0.1:x", "host"},
		{"redlock://[::1]:1,[::1", "host"},
		{"redlock://[::1]:1,[::1]:1", "host"},
		{"redlock://" + nodes3 + "/locks", "path"},
		{"redlock://" + nodes3 + "?bogus=1", "bogus"},
		{"redlock://" + nodes3 + "?node_timeout=20ms&zz=1&aa=2", "aa"},
		{"redlock://" + nodes3 + "?node_timeout=1ms", "node_timeout"},
		{"redlock://" + nodes3 + "?node_timeout=100ms", "node_timeout"},
		{"redlock://" + nodes3 + "?node_timeout=soon", "node_timeout"},
		{"redlock://" + nodes3 + "?drift=0s", "drift"},
		{"redlock://" + nodes3 + "?drift=-1ms", "drift"},
		{"redlock://" + nodes3 + "?drift=2", "drift"},
		{"redlock://" + nodes3 + "?prefix=", "prefix"},
		{"redlock://" + nodes3 + "?prefix=a{b}", "prefix"},
		{"redlock://" + nodes3 + "?fencing=maybe", "fencing"},
		{"redlock://" + nodes3 + "?fence_ttl=0s", "fence_ttl"},
		{"redlock://" + nodes3 + "?ttl=1ms", "ttl"}, // dlock's own parameter
	} {
		err := locktest.OpenFails(t, t.Context(), tc.url, tc.param)
		if pe, ok := errors.AsType[*dlock.ParamError](err); ok && pe.Scheme != "redlock" {
			t.Errorf("Open(%q): ParamError.Scheme = %q", tc.url, pe.Scheme)
		}
	}
}

// Node lists that net/url alone rejects: IPv6 literals, a last node
// without a port after nodes with one.
func TestOpenHostLists(t *testing.T) {
	for _, tc := range []struct {
		url  string
		want []string
	}{
		{"redlock://[::1]:7001,[::1]:7002,[::1]", []string{"[::1]:7001", "[::1]:7002", "[::1]:6379"}},
		{"redlock://127.0.0.1:7001,localhost", []string{"127.0.0.1:7001", "localhost:6379"}},
		{"redlock://user:pw@[::1]:1,127.0.0.1:2,[::1]:3?prefix=x:", []string{"[::1]:1", "127.0.0.1:2", "[::1]:3"}},
	} {
		l, err := dlock.Open(t.Context(), tc.url)
		if err != nil {
			t.Errorf("Open(%q): %v", tc.url, err)
			continue
		}
		d := l.Driver().(*Driver)
		var got []string
		for _, c := range d.clients {
			got = append(got, c.(*redis.Client).Options().Addr)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("Open(%q): nodes %v, want %v", tc.url, got, tc.want)
		}
		if o := d.clients[0].(*redis.Client).Options(); strings.Contains(tc.url, "user:pw@") && (o.Username != "user" || o.Password != "pw") {
			t.Errorf("Open(%q): user %q password %q", tc.url, o.Username, o.Password)
		}
		_ = l.Close()
	}
}

func TestOpenParams(t *testing.T) {
	l, err := dlock.Open(t.Context(), "redlock://:pw@localhost,"+nodes3+"?node_timeout=7ms&drift=4ms&prefix=app:&fencing=false&fence_ttl=1h&ttl=5s")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	d := l.Driver().(*Driver)
	if d.Nodes() != 4 || d.Quorum() != 3 {
		t.Errorf("%d nodes, quorum %d; want 4, 3", d.Nodes(), d.Quorum())
	}
	if d.nodeTimeout != 7*time.Millisecond || d.drift != 4*time.Millisecond || d.prefix != "app:" || d.fencing {
		t.Errorf("node timeout %v, drift %v, prefix %q, fencing %v", d.nodeTimeout, d.drift, d.prefix, d.fencing)
	}
	if o := d.clients[0].(*redis.Client).Options(); o.Addr != "localhost:6379" || o.Password != "pw" {
		t.Errorf("node 0: address %q, password %q; want localhost:6379, pw", o.Addr, o.Password)
	}
	if d.channel != "app:released" {
		t.Errorf("channel %q", d.channel)
	}
	if !d.ownClients {
		t.Error("a driver opened from a URL must close its clients")
	}

	l2, err := dlock.Open(t.Context(), "redlock://"+nodes3+"?fence_ttl=1h")
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	if d := l2.Driver().(*Driver); d.nodeTimeout != DefaultNodeTimeout || d.drift != DefaultDrift ||
		d.prefix != DefaultPrefix || !d.fencing || d.fenceTTL != int64(time.Hour/time.Millisecond) {
		t.Errorf("defaults: node timeout %v, drift %v, prefix %q, fencing %v, fence ttl %v",
			d.nodeTimeout, d.drift, d.prefix, d.fencing, d.fenceTTL)
	}
}

// A Locker opened from a URL works against real nodes.
func TestOpen(t *testing.T) {
	servers := testenv.StartRedisN(t, 3, testenv.RedisOptions{})
	ctx := t.Context()
	l := locktest.Opener("redlock://" + testenv.Addrs(servers) + "?ttl=2s")(t)
	defer l.Close()
	lease, err := l.Acquire(ctx, "open/url")
	if err != nil {
		t.Fatal(err)
	}
	if lease.TTL() != 2*time.Second {
		t.Errorf("TTL %v, want the URL's 2s", lease.TTL())
	}
	if lease.Token() == 0 {
		t.Error("token 0")
	}
	if err := lease.Release(ctx); err != nil {
		t.Error(err)
	}
}

func TestNewDriverErrors(t *testing.T) {
	c := newCluster(t, 1)
	cs := c.clients(t)
	if _, err := NewDriver(nil, nil); err == nil {
		t.Error("NewDriver with no clients succeeded")
	}
	if _, err := NewDriver(append(cs, nil), nil); err == nil {
		t.Error("NewDriver with a nil client succeeded")
	}
	if _, err := NewDriver(cs, &Options{Prefix: "{x}"}); err == nil {
		t.Error("NewDriver with braces in the prefix succeeded")
	}
	d, err := NewDriver(cs, &Options{NodeTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d.nodeTimeout != MaxNodeTimeout {
		t.Errorf("node timeout %v, want it clamped to %v", d.nodeTimeout, MaxNodeTimeout)
	}
}

// FuzzOpen: any URL either opens (and closes) or fails with an error;
// nothing panics. No node is dialed.
func FuzzOpen(f *testing.F) {
	for _, s := range []string{
		"redlock://" + nodes3,
		"redlock://h1,h2,h3:1",
		"redlock://:pw@h1:1,h2:2?prefix=a:&fencing=false",
		"redlock://h1:1,,h2:2",
		"redlock://h1:1,h1:1",
		"redlock://h:0",
		"redlock://" + nodes3 + "?node_timeout=5ms&drift=1ms&fence_ttl=1h",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		l, err := dlock.Open(context.Background(), s)
		if err != nil {
			return
		}
		if _, ok := l.Driver().(*Driver); !ok && strings.HasPrefix(s, "redlock:") {
			t.Errorf("Open(%q) made a %T", s, l.Driver())
		}
		_ = l.Close()
	})
}
