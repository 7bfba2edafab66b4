package etcdlock_test

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/etcdlock"
	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/locktest"
)

func TestOpen(t *testing.T) {
	eps := testenv.EtcdEndpoints(t)
	admin := testenv.EtcdClient(t, eps)
	ctx := locktest.Context(t, 20*time.Second)
	prefix := randomPrefix()
	l, err := dlock.Open(ctx, "etcd://"+strings.Join(eps, ",")+"/"+prefix+"/jobs?ttl=3s&dial_timeout=2s&request_timeout=3s")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	d := drv(l)
	if d.Scheme() != "etcd" || d.Prefix() != prefix+"/jobs" {
		t.Errorf("Scheme, Prefix = %q, %q; want etcd, %s/jobs", d.Scheme(), d.Prefix(), prefix)
	}
	lease := locktest.Must(t)(l.Acquire(ctx, "nightly"))
	if lease.TTL() != 3*time.Second {
		t.Errorf("TTL from the URL = %v, want 3s", lease.TTL())
	}
	kv := holderKey(t, admin, prefix+"/jobs", "nightly")
	want := fmt.Sprintf("%s/jobs/nightly/#%x", prefix, kv.Lease)
	if string(kv.Key) != want || string(kv.Value) != lease.Owner() || uint64(kv.CreateRevision) != lease.Token() {
		t.Errorf("holder key %q = %q rev %d, want %q = %q rev %d", kv.Key, kv.Value, kv.CreateRevision, want, lease.Owner(), lease.Token())
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if _, err := d.Client().Get(ctx, "x"); err == nil {
		t.Error("the client a URL opened still works after Close; Close must close it")
	}

	// A driver from New leaves the caller's client open.
	c := testenv.EtcdClient(t, eps)
	l2, err := etcdlock.New(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	if drv(l2).Prefix() != etcdlock.DefaultPrefix {
		t.Errorf("default prefix %q, want %q", drv(l2).Prefix(), etcdlock.DefaultPrefix)
	}
	_ = l2.Close()
	if _, err := c.Get(ctx, "x"); err != nil {
		t.Errorf("the caller's client after Close: %v; Close must not close it", err)
	}

	for _, bad := range []struct{ url, param string }{
		{"etcd://" + eps[0] + "?colour=red", "colour"},
		{"etcd://" + eps[0] + "?dial_timeout=soon", "dial_timeout"},
		{"etcd://" + eps[0] + "?dial_timeout=0s", "dial_timeout"},
		{"etcd://" + eps[0] + "?request_timeout=-1s", "request_timeout"},
		{"etcd://" + eps[0] + "?request_timeout=0", "request_timeout"},
		{"etcd://" + eps[0] + "?ttl=1ms", "ttl"},
		{"etcd://:secret@" + eps[0], "userinfo"},
		{"etcd://" + eps[0] + "?cacert=/etc/ca.pem", "cacert"},
		{"etcds://" + eps[0] + "?cacert=/nonexistent/ca.pem", "cacert"},
		{"etcd://" + eps[0] + ",,127.0.0.1:1", "host"},
	} {
		locktest.OpenFails(t, ctx, bad.url, bad.param)
	}

	start := time.Now()
	if l, err := dlock.Open(ctx, "etcd://127.0.0.1:1?dial_timeout=300ms"); err == nil {
		_ = l.Close()
		t.Error("Open of an address where no etcd listens succeeded")
	} else if took := time.Since(start); took > 5*time.Second {
		// A hang bound, over 10× the dial timeout.
		t.Errorf("Open of a dead address took %v, want about its dial_timeout 300ms", took)
	}
}

// TestOpenTimeoutNamed: when no member answers, Open's error names the
// bound that ended the wait, with its real length: the caller's context
// when it ended first, else the dial timeout.
func TestOpenTimeoutNamed(t *testing.T) {
	dead := "127.0.0.1:1" // nothing listens on port 1 of loopback
	for _, c := range []struct {
		name    string
		ctx     time.Duration // 0: no deadline
		url     string
		want    string
		notWant string
	}{
		{"context first", 300 * time.Millisecond, "etcd://" + dead + "?dial_timeout=5s",
			"before the caller's context reached its deadline, after ", "5s"},
		{"dial timeout first", 0, "etcd://" + dead + "?dial_timeout=250ms",
			"within the dial timeout 250ms (dial_timeout)", "context"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			if c.ctx > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, c.ctx)
				defer cancel()
			}
			start := time.Now()
			l, err := dlock.Open(ctx, c.url)
			if err == nil {
				_ = l.Close()
				t.Fatal("Open of an address where no etcd listens succeeded")
			}
			if took := time.Since(start); took > 5*time.Second { // a hang bound, over 10× the 300ms or 250ms
				t.Errorf("Open took %v", took)
			}
			msg := err.Error()
			if !strings.Contains(msg, c.want) || strings.Contains(strings.SplitN(msg, ": ", 3)[1], c.notWant) {
				t.Errorf("Open error %q, want it to say %q and not %q", msg, c.want, c.notWant)
			}
			if c.ctx > 0 {
				n := -1
				if m := regexp.MustCompile(`after (\d+)ms of waiting`).FindStringSubmatch(msg); m != nil {
					n, _ = strconv.Atoi(m[1])
				}
				if n < 250 || n > 1000 {
					t.Errorf("Open error %q: the wait it states is not about the context's 300ms", msg)
				}
			}
		})
	}
}
