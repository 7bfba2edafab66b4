package redislock_test

import (
	"context"
	"errors"
	"net"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/locktest"
	"github.com/dlockgo/dlock/redislock"
)

func TestOpenURL(t *testing.T) {
	addr := testenv.RedisAddr(t)
	host, port, _ := net.SplitHostPort(addr)
	tests := []struct {
		url    string
		prefix string
	}{
		{"redis://" + addr, redislock.DefaultPrefix},
		{"redis://" + addr + "/", redislock.DefaultPrefix},
		{"redis://" + addr + "/3?prefix=dlocktest:url:", "dlocktest:url:"},
		{"redis://" + addr + "/0?prefix=dlocktest:all:&dial_timeout=1s&read_timeout=2s&write_timeout=2s" +
			"&pool_size=4&max_retries=-1&client_name=dlocktest&queue_ttl=1s&fence_ttl=1h&ttl=5s&renew=false", "dlocktest:all:"},
	}
	if port == redislock.DefaultPort {
		tests = append(tests, struct{ url, prefix string }{"redis://" + host, redislock.DefaultPrefix})
	}
	for _, tt := range tests {
		t.Run(tt.url, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			l, err := dlock.Open(ctx, tt.url)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			d, ok := l.Driver().(*redislock.Driver)
			if !ok {
				t.Fatalf("driver is %T", l.Driver())
			}
			if c, ok := d.Client().(*redis.Client); !ok || !c.Options().ContextTimeoutEnabled {
				t.Errorf("client %T without ContextTimeoutEnabled", d.Client())
			}
			name := "url/" + strings.Repeat("x", 3)
			lease, err := l.TryAcquire(ctx, name, dlock.WithTTL(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			n, err := d.Client().Exists(ctx, tt.prefix+"{"+name+"}").Result()
			if err != nil || n != 1 {
				t.Errorf("lock key %q: exists %d, %v", tt.prefix+"{"+name+"}", n, err)
			}
			if err := lease.Release(ctx); err != nil {
				t.Fatal(err)
			}
			d.Client().Del(ctx, tt.prefix+"{"+name+"}:fence")
		})
	}
}

func TestOpenURLErrors(t *testing.T) {
	addr := testenv.RedisAddr(t)
	tests := []struct {
		url, param string
	}{
		{"redis://" + addr + "?bogus=1", "bogus"},
		{"redis://" + addr + "?prefix=x:&zzz=1&aaa=2", "aaa"},
		{"redis://127.0.0.1:99999", "port"},
		{"redis://127.0.0.1:0", "port"},
		{"redis://:6379", "host"},
		{"redis://" + addr + "/abc", "db"},
		{"redis://" + addr + "/1/2", "db"},
		{"redis://" + addr + "?dial_timeout=soon", "dial_timeout"},
		{"redis://" + addr + "?read_timeout=-1s", "read_timeout"},
		{"redis://" + addr + "?pool_size=many", "pool_size"},
		{"redis://" + addr + "?pool_size=-1", "pool_size"},
		{"redis://" + addr + "?max_retries=-2", "max_retries"},
		{"redis://" + addr + "?prefix=a{b}", "prefix"},
		{"redis://" + addr + "?prefix=", "prefix"},
		{"redis://" + addr + "?queue_ttl=0s", "queue_ttl"},
		{"redis://" + addr + "?fence_ttl=1", "fence_ttl"},
		{"redis://127.0.0.1:1,127.0.0.1:2", "host"},
		{"redis+sentinel://127.0.0.1:1", "master_name"},
		{"redis+sentinel://?master_name=m", "host"},
		{"redis+sentinel://127.0.0.1:1/x?master_name=m", "db"},
		{"redis+sentinel://127.0.0.1:1?master_name=m&addr=127.0.0.1:99999", "host"},
		{"redis+sentinel://127.0.0.1:1?master_name=m&bogus=1", "bogus"},
		{"rediss+sentinel://127.0.0.1:1,127.0.0.1:1?master_name=m", "host"},
		{"redis+cluster://127.0.0.1:1/3", "db"},
		{"redis+cluster://", "host"},
		{"redis+cluster://127.0.0.1:1?addr=127.0.0.1:1", "host"},
		{"redis+cluster://127.0.0.1:1?pool_size=-1", "pool_size"},
		{"rediss+cluster://127.0.0.1:1?prefix=a}", "prefix"},
	}
	ctx := locktest.Context(t, time.Minute)
	for _, tt := range tests {
		locktest.OpenFails(t, ctx, tt.url, tt.param)
	}
}

// closedAddrs returns n loopback addresses, distinct, on which nothing
// listens: ports that were open together and are closed again.
func closedAddrs(t *testing.T, n int) []string {
	t.Helper()
	addrs := make([]string, n)
	for i := range addrs {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		addrs[i] = ln.Addr().String()
	}
	return addrs
}

func TestOpenUnreachable(t *testing.T) {
	closed := closedAddrs(t, 1)[0]
	for _, scheme := range []string{"redis", "rediss", "redis+sentinel", "rediss+sentinel", "redis+cluster", "rediss+cluster"} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		start := time.Now()
		raw := scheme + "://user:s3cret@" + closed + "?dial_timeout=1s"
		if strings.Contains(scheme, "sentinel") {
			raw += "&master_name=m&sentinel_password=s3cret"
		}
		l, err := dlock.Open(ctx, raw)
		cancel()
		if err == nil {
			l.Close()
			t.Fatalf("Open %s of a closed port succeeded", scheme)
		}
		t.Logf("%s: %v (after %v)", scheme, err, time.Since(start))
		if !strings.Contains(err.Error(), closed) || !strings.Contains(err.Error(), "ping") {
			t.Errorf("error %q does not say which server failed to answer", err)
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("error %q shows the password", err)
		}
		if errors.As(err, new(*dlock.ParamError)) {
			t.Errorf("unreachable server reported as a bad parameter: %v", err)
		}
	}
}

// FuzzURL checks that no URL makes the opener panic. It never reaches a
// server: every URL it opens points at a closed port or fails to parse.
func FuzzURL(f *testing.F) {
	for _, s := range []string{
		"redis://127.0.0.1:1/0?prefix=x:", "redis://u:p@127.0.0.1:1?dial_timeout=1s",
		"rediss://127.0.0.1:1/9?pool_size=3", "redis://:1/%zz", "redis://[::1]:1?queue_ttl=1h",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		u, err := url.Parse(s)
		if err != nil || (u.Scheme != "redis" && u.Scheme != "rediss") {
			return
		}
		if h := u.Hostname(); h != "127.0.0.1" || u.Port() != "1" {
			return // never dial anything but a closed loopback port
		}
		q := u.Query()
		q.Set("max_retries", "-1")
		q.Set("dial_timeout", "50ms")
		u.RawQuery = q.Encode()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if l, err := dlock.Open(ctx, u.String()); err == nil {
			l.Close()
			t.Errorf("Open %q succeeded on a closed port", u)
		}
	})
}

// TestOpenFailsFast: an Open whose server cannot serve it says why, and
// soon. A refused connection is reported after one dial (go-redis
// retries dials, five per attempt and an attempt per retry, each
// sentinel query too: a refused sentinel took 36s); a TLS URL to a
// plain server says that it does not speak TLS; a server that accepts
// and never answers is given up after dial_timeout plus read_timeout,
// and every Open returns by its context's deadline. The bounds are hang
// bounds, ten times what each case is expected to take.
func TestOpenFailsFast(t *testing.T) {
	closed := closedAddrs(t, 1)[0]
	silent := testenv.SilentServer(t)
	plain := testenv.RedisAddr(t)
	open := func(t *testing.T, ctx context.Context, raw string, bound time.Duration) error {
		t.Helper()
		start := time.Now()
		l, err := dlock.Open(ctx, raw)
		took := time.Since(start)
		if err == nil {
			l.Close()
			t.Fatalf("Open %s succeeded", raw)
		}
		t.Logf("%s: %v (after %v)", raw, err, took)
		if took > bound {
			t.Errorf("Open %s took %v, more than %v", raw, took, bound)
		}
		return err
	}
	t.Run("refused", func(t *testing.T) {
		for _, scheme := range []string{"redis", "rediss", "redis+sentinel", "rediss+sentinel", "redis+cluster", "rediss+cluster"} {
			raw := scheme + "://" + closed
			if strings.Contains(scheme, "sentinel") {
				raw += "?master_name=m"
			}
			err := open(t, context.Background(), raw, time.Second)
			if !errors.Is(err, syscall.ECONNREFUSED) || !strings.Contains(err.Error(), closed+" refused the connection") {
				t.Errorf("error %q does not say that %s refused the connection", err, closed)
			}
		}
	})
	t.Run("all sentinels refused", func(t *testing.T) {
		closedPair := closedAddrs(t, 2)
		err := open(t, context.Background(), "redis+sentinel://"+closedPair[0]+","+closedPair[1]+"?master_name=m", time.Second)
		if !errors.Is(err, syscall.ECONNREFUSED) || !strings.Contains(err.Error(), "every server listed") {
			t.Errorf("error %q does not say that every sentinel refused the connection", err)
		}
	})
	t.Run("not TLS", func(t *testing.T) {
		// A plain Redis waits for the end of what it takes for an inline
		// command: the handshake times out, and a plain PING tells why.
		for _, raw := range []string{
			"rediss://" + plain + "?dial_timeout=300ms",
			"redis://" + plain + "?tls=true&dial_timeout=300ms",
		} {
			err := open(t, context.Background(), raw, 10*300*time.Millisecond)
			if !strings.Contains(err.Error(), "the server at "+plain+" does not speak TLS") {
				t.Errorf("error %q does not say that the server does not speak TLS", err)
			}
		}
	})
	t.Run("silent", func(t *testing.T) {
		// The documented bound: dial_timeout plus read_timeout.
		const q = "dial_timeout=200ms&read_timeout=100ms"
		for _, raw := range []string{
			"redis://" + silent + "?" + q,
			"redis+sentinel://" + silent + "?master_name=m&" + q,
			"rediss://" + silent + "?" + q,
		} {
			open(t, context.Background(), raw, 10*300*time.Millisecond)
		}
	})
	t.Run("deadline", func(t *testing.T) {
		// go-redis dials in the background, on a context of its own: a
		// failover client's Close waited for the sentinel query, 3s past
		// a 2s deadline.
		for _, raw := range []string{
			"redis://" + silent,
			"redis+sentinel://" + silent + "?master_name=m",
			"rediss://" + silent,
			"rediss://" + plain,
			"redis+sentinel://" + closed + "?master_name=m",
		} {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			open(t, ctx, raw, 2*time.Second+time.Second)
			cancel()
		}
	})
}
