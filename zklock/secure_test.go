package zklock_test

import (
	"errors"
	"net/url"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/locktest"
)

const zkLockPW = "lock-pw-83be"

// TestSecured: a zk:// URL with user information authenticates by digest
// and creates its nodes for that user only (ACL creator-only): the
// conformance suite passes through it; a held lock's node cannot be
// deleted, nor a node queued beside it, by an unauthenticated client or
// by another user; another user, or a wrong password, fails to open on
// that prefix with an error that says why and shows no password.
func TestSecured(t *testing.T) {
	servers := []string{testenv.ZKAddr(t)}
	prefix := testPrefix()
	good := "zk://locks:" + zkLockPW + "@" + servers[0] + prefix + "?session_timeout=2s"
	adm := &admin{t: t, conn: connectAs(t, servers, "locks", zkLockPW)}

	t.Run("Conformance", func(t *testing.T) {
		locktest.Run(t, suiteHarness(prefix, adm, locktest.Opener(good)))
	})

	t.Run("OthersCannotTouch", func(t *testing.T) {
		ctx := locktest.Context(t, 20*time.Second)
		l, err := dlock.Open(ctx, good)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		lease := locktest.Must(t)(l.Acquire(ctx, "guarded"))
		defer lease.Release(ctx)
		nodes := adm.locks(prefix, "guarded")
		if len(nodes) != 1 {
			t.Fatalf("lock nodes %v, want one", nodes)
		}
		node := prefix + "/guarded/" + nodes[0]
		for _, who := range []struct{ name, user, pw string }{
			{"an unauthenticated client", "", ""},
			{"another user", "intruder", "intruder-pw"},
			{"a wrong password", "locks", "wrong-" + zkLockPW},
		} {
			c := connectAs(t, servers, who.user, who.pw)
			if err := c.Delete(node, -1); !errors.Is(err, zk.ErrNoAuth) {
				t.Errorf("%s deleted the held lock's node: %v, want zk.ErrNoAuth", who.name, err)
			}
			if err := c.Delete(prefix+"/guarded", -1); !errors.Is(err, zk.ErrNoAuth) {
				t.Errorf("%s deleted the lock's znode: %v, want zk.ErrNoAuth", who.name, err)
			}
			if _, err := c.Create(prefix+"/guarded/_c_x-lock#", nil, zk.FlagEphemeralSequential, zk.WorldACL(zk.PermAll)); !errors.Is(err, zk.ErrNoAuth) {
				t.Errorf("%s queued a node beside the lock: %v, want zk.ErrNoAuth", who.name, err)
			}
		}
		if err := lease.Err(); err != nil {
			t.Errorf("the lease after the attempts: %v", err)
		}
	})

	t.Run("BadURLs", func(t *testing.T) {
		locktest.RefusesBadURLs(t, []string{zkLockPW, "intruder-pw"}, []locktest.BadURL{
			{What: "wrong password", URL: "zk://locks:wrong-" + zkLockPW + "@" + servers[0] + prefix, Cause: "may not read"},
			{What: "another user", URL: "zk://intruder:intruder-pw@" + servers[0] + prefix, Cause: "may not read"},
			{What: "no password", URL: "zk://locks@" + servers[0] + prefix, Cause: "userinfo"},
			{What: "bad acl", URL: "zk://locks:" + zkLockPW + "@" + servers[0] + prefix + "?acl=creator:xyz", Cause: `"acl"`},
		})
	})
}

// TestSecuredTLS: through the secure client port of a server that
// requires client certificates, with digest credentials, the conformance
// suite passes; a CA that did not sign the server's certificate and a
// missing client certificate fail Open with the TLS error.
func TestSecuredTLS(t *testing.T) {
	pki := testenv.NewPKI(t)
	zc := testenv.StartZKWith(t, 1, testenv.ZKOptions{TLS: pki})
	addr := zc.Servers[0].SecureAddr
	prefix := testPrefix()
	mk := func(kv ...string) string {
		q := testenv.Values(append([]string{"tls", "true", "session_timeout", "2s"}, kv...)...)
		u := url.URL{Scheme: "zk", User: url.UserPassword("locks", zkLockPW), Host: addr, Path: prefix, RawQuery: q.Encode()}
		return u.String()
	}
	good := mk("cacert", pki.CA, "cert", pki.ClientCert, "key", pki.ClientKey)
	adm := &admin{t: t, conn: connectAs(t, []string{zc.Servers[0].Addr}, "locks", zkLockPW)}
	t.Run("Conformance", func(t *testing.T) {
		locktest.Run(t, suiteHarness(prefix, adm, locktest.Opener(good)))
	})
	t.Run("BadURLs", func(t *testing.T) {
		locktest.RefusesBadURLs(t, []string{zkLockPW}, []locktest.BadURL{
			{What: "wrong CA", URL: mk("cacert", pki.OtherCA, "cert", pki.ClientCert, "key", pki.ClientKey),
				Cause: "certificate signed by unknown authority"},
			{What: "no client certificate", URL: mk("cacert", pki.CA), Cause: "certificate"},
			{What: "missing key file", URL: mk("cacert", pki.CA, "cert", pki.ClientCert, "key", pki.Dir+"/absent.pem"),
				Cause: `"cert"`},
		})
	})
}
