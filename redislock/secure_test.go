package redislock

import (
	"net/url"
	"strings"
	"testing"

	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/locktest"
)

// startSecuredRedis starts a Redis that speaks TLS only, requires client
// certificates its private CA signed, and knows the user "locks" (password
// lockPW) with testenv.RedisLockACL("dlocktest:") only; the admin (default
// user) has adminPW.
func startSecuredRedis(t *testing.T) (*testenv.RedisServer, *testenv.PKI) {
	t.Helper()
	pki := testenv.NewPKI(t)
	return testenv.StartSecuredRedis(t, pki, adminPW, "locks", lockPW, "dlocktest:"), pki
}

const (
	adminPW = "admin-pw-9f2c"
	lockPW  = "lock-pw-51ab"
)

// securedURL is the rediss:// URL of user:pw on srv with the TLS
// parameters kv (name, value, ...).
func securedURL(srv *testenv.RedisServer, user, pw string, kv ...string) string {
	q := testenv.Values(kv...)
	u := url.URL{Scheme: "rediss", User: url.UserPassword(user, pw), Host: srv.Addr, RawQuery: q.Encode()}
	return u.String()
}

// TestSecured: over TLS with client certificates, as an ACL user allowed
// only the lock prefix's keys and channels, the conformance suite passes;
// a wrong password, a CA that did not sign the server's certificate, a
// missing client certificate and a missing CA file each fail to open with
// an error that names the cause and shows no password.
func TestSecured(t *testing.T) {
	srv, pki := startSecuredRedis(t)
	admin := srv.Client()
	prefix := "dlocktest:" + randomHex(6) + ":"
	tlsArgs := []string{"cacert", pki.CA, "cert", pki.ClientCert, "key", pki.ClientKey, "prefix", prefix}
	good := securedURL(srv, "locks", lockPW, tlsArgs...)

	t.Run("Conformance", func(t *testing.T) {
		conform(t, admin, LayoutDlock, prefix, locktest.Opener(good))
	})

	t.Run("OnlyItsPrefix", func(t *testing.T) {
		// The same user with another prefix is refused by the ACL.
		l := openURL(t, securedURL(srv, "locks", lockPW, "cacert", pki.CA, "cert", pki.ClientCert, "key", pki.ClientKey,
			"prefix", "other:"))
		defer l.Close()
		_, err := l.TryAcquire(t.Context(), "x")
		if err == nil || !strings.Contains(err.Error(), "NOPERM") {
			t.Fatalf("TryAcquire outside the user's key pattern: %v, want a NOPERM error", err)
		}
	})

	t.Run("BadURLs", func(t *testing.T) {
		withTLS := func(user, pw string, kv ...string) string { return securedURL(srv, user, pw, kv...) }
		locktest.RefusesBadURLs(t, []string{lockPW, adminPW}, []locktest.BadURL{
			{What: "wrong password", URL: withTLS("locks", "wrong-"+lockPW, tlsArgs...), Cause: "password"},
			{What: "wrong CA", URL: withTLS("locks", lockPW, "cacert", pki.OtherCA, "cert", pki.ClientCert, "key", pki.ClientKey),
				Cause: "certificate signed by unknown authority"},
			{What: "no client certificate", URL: withTLS("locks", lockPW, "cacert", pki.CA), Cause: "certificate"},
			{What: "missing CA file", URL: withTLS("locks", lockPW, "cacert", pki.Dir+"/absent.pem"), Cause: `"cacert"`},
			{What: "cert without key", URL: withTLS("locks", lockPW, "cacert", pki.CA, "cert", pki.ClientCert), Cause: `"cert"`},
			{What: "plain connection to TLS", URL: "redis://locks:" + lockPW + "@" + srv.Addr + "?dial_timeout=1s", Cause: "rediss://"},
			{What: "cacert on a plain URL", URL: "redis://locks:" + lockPW + "@" + srv.Addr + "?cacert=" + pki.CA, Cause: "tls=true"},
		})
	})

	t.Run("Redacted", func(t *testing.T) {
		u, err := url.Parse(good)
		if err != nil {
			t.Fatal(err)
		}
		if r := driver.Redact(u); strings.Contains(r, lockPW) {
			t.Errorf("Redact(%s) shows the password", r)
		}
	})
}
