package etcdlock_test

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/locktest"
)

const (
	etcdRootPW = "root-pw-7d1e"
	etcdLockPW = "lock-pw-0c3a"
)

// TestSecured: on an etcd that serves TLS only, requires client
// certificates and has authentication on, the user "locks", whose role
// may read and write the lock prefix only, passes the conformance suite
// through an etcds:// URL; it cannot touch another prefix; a wrong
// password, a CA that did not sign the server's certificate, a missing
// client certificate and a missing CA file each fail to open with an
// error that names the cause and shows no password.
func TestSecured(t *testing.T) {
	pki := testenv.NewPKI(t)
	c := testenv.StartEtcd(t, testenv.EtcdOptions{TLS: pki})
	prefix := randomPrefix()
	root := c.EnableAuth(etcdRootPW, testenv.EtcdUser{Name: "locks", Password: etcdLockPW, Prefix: prefix})
	ep := c.Endpoints()[0]
	mk := func(user, pw, path string, kv ...string) string {
		q := testenv.Values(kv...)
		u := url.URL{Scheme: "etcds", Host: ep, Path: "/" + path, RawQuery: q.Encode()}
		if user != "" {
			u.User = url.UserPassword(user, pw)
		}
		return u.String()
	}
	tlsArgs := []string{"cacert", pki.CA, "cert", pki.ClientCert, "key", pki.ClientKey, "dial_timeout", "2s"}
	good := mk("locks", etcdLockPW, prefix, tlsArgs...)

	t.Run("Conformance", func(t *testing.T) {
		locktest.Run(t, locktest.Harness{
			TTL:       time.Second,
			NewLocker: locktest.Opener(good),
			TakeAway: func(t *testing.T, name string) {
				key := holderKey(t, root, prefix, name).Key
				if _, err := root.Delete(context.Background(), string(key)); err != nil {
					t.Fatalf("delete %q: %v", key, err)
				}
			},
			Crash: func(t *testing.T, l *dlock.Locker) { _ = drv(l).Client().Close() },
		})
	})

	t.Run("OnlyItsPrefix", func(t *testing.T) {
		ctx := locktest.Context(t, 10*time.Second)
		l, err := dlock.Open(ctx, mk("locks", etcdLockPW, "other", tlsArgs...))
		if err == nil {
			_, err = l.TryAcquire(ctx, "x")
			_ = l.Close()
		}
		if err == nil || !strings.Contains(err.Error(), "permission denied") {
			t.Fatalf("a prefix outside the user's role: %v, want a permission denied error", err)
		}
	})

	// With layout=concurrency and no prefix, Open reads a key the role
	// need not cover; each lock is checked on its own range.
	t.Run("ConcurrencyNoPrefix", func(t *testing.T) {
		ctx := locktest.Context(t, 10*time.Second)
		l, err := dlock.Open(ctx, mk("locks", etcdLockPW, "", append(tlsArgs, "layout", "concurrency")...))
		if err != nil {
			t.Fatalf("Open without a prefix, by a user whose role covers %q only: %v", prefix, err)
		}
		defer l.Close()
		lease, err := l.TryAcquire(ctx, prefix+"/x")
		if err != nil {
			t.Fatalf("a lock inside the role's range: %v", err)
		}
		_ = lease.Release(ctx)
		if _, err := l.TryAcquire(ctx, "other/x"); err == nil || !strings.Contains(err.Error(), "permission denied") {
			t.Errorf("a lock outside the role's range: %v, want a permission denied error", err)
		}
		_, err = dlock.Open(ctx, mk("locks", "wrong-"+etcdLockPW, "", append(tlsArgs, "layout", "concurrency")...))
		if err == nil || !strings.Contains(err.Error(), "authentication failed") {
			t.Errorf("Open without a prefix, with a wrong password: %v, want authentication failed", err)
		}
	})

	t.Run("BadURLs", func(t *testing.T) {
		locktest.RefusesBadURLs(t, []string{etcdLockPW, etcdRootPW}, []locktest.BadURL{
			{What: "wrong password", URL: mk("locks", "wrong-"+etcdLockPW, prefix, tlsArgs...), Cause: "authentication failed"},
			{What: "no credentials", URL: mk("", "", prefix, tlsArgs...), Cause: "may not read the prefix"},
			{What: "wrong CA", URL: mk("locks", etcdLockPW, prefix, "cacert", pki.OtherCA, "cert", pki.ClientCert,
				"key", pki.ClientKey, "dial_timeout", "2s"), Cause: "certificate signed by unknown authority"},
			{What: "no client certificate", URL: mk("locks", etcdLockPW, prefix, "cacert", pki.CA, "dial_timeout", "2s"),
				Cause: "certificate"},
			{What: "missing CA file", URL: mk("locks", etcdLockPW, prefix, "cacert", pki.Dir+"/absent.pem"), Cause: `"cacert"`},
			{What: "plain connection to TLS", URL: "etcd://locks:" + etcdLockPW + "@" + ep + "/" + prefix + "?dial_timeout=2s",
				Cause: "use etcds://"},
		})
	})
}
