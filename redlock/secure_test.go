package redlock

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

// nodeACL is what the package documentation (URL) gives as the least a
// node's ACL user needs, for the default prefix.
var nodeACL = []string{"~dlock:rl:*", "&dlock:rl:*", "+ping", "+evalsha", "+eval", "+script|load", "+exists", "+get",
	"+set", "+del", "+incr", "+pexpire", "+pttl", "+time", "+publish", "+subscribe", "+unsubscribe", "+scan"}

const (
	nodeAdminPW = "admin-pw-4e1d"
	nodeLockPW  = "lock-pw-b27f"
)

// TestSecured: three TLS-only nodes that require client certificates,
// each with an ACL user limited to nodeACL: the conformance suite passes
// through a redlock:// URL with tls=true. A redlock:// URL opens without
// reaching its nodes, so a wrong password, a wrong CA or a missing client
// certificate fails Driver.Prepare (and the first acquisitions) instead,
// with an error that names the cause and shows no password.
func TestSecured(t *testing.T) {
	pki := testenv.NewPKI(t)
	args := append([]string{"--requirepass", nodeAdminPW, "--user", "locks", "on", ">" + nodeLockPW}, nodeACL...)
	servers := testenv.StartRedisN(t, 3, testenv.RedisOptions{TLS: pki, Password: nodeAdminPW, Args: args})
	mk := func(pw string, kv ...string) string {
		q := testenv.Values(append([]string{"tls", "true", "node_timeout", "50ms"}, kv...)...)
		u := url.URL{Scheme: "redlock", User: url.UserPassword("locks", pw), Host: testenv.Addrs(servers), RawQuery: q.Encode()}
		return u.String()
	}
	files := []string{"cacert", pki.CA, "cert", pki.ClientCert, "key", pki.ClientKey}
	good := mk(nodeLockPW, files...)

	t.Run("Conformance", func(t *testing.T) {
		open := locktest.Opener(good)
		locktest.Run(t, locktest.Harness{
			NewLocker: func(t *testing.T, opts ...dlock.Option) *dlock.Locker {
				l := open(t, opts...)
				prepare(t, l.Driver().(*Driver)) // the TLS handshakes before the timed calls
				return l
			},
			TakeAway: func(t *testing.T, name string) {
				for _, s := range servers {
					if err := s.Client().Del(context.Background(), DefaultPrefix+"{"+name+"}").Err(); err != nil {
						t.Fatal(err)
					}
				}
			},
		})
	})

	t.Run("BadCredentials", func(t *testing.T) {
		for _, c := range []struct {
			what, url, cause string
			refusal          bool // a waiting Acquire gives up at once
		}{
			{"wrong password", mk("wrong-"+nodeLockPW, files...), "WRONGPASS", true},
			{"wrong CA", mk(nodeLockPW, "cacert", pki.OtherCA, "cert", pki.ClientCert, "key", pki.ClientKey), "unknown authority", true},
			{"no client certificate", mk(nodeLockPW, "cacert", pki.CA), "certificate", false},
		} {
			l := locktest.Opener(c.url)(t)
			// Prepare dials every node without the node timeout, which a
			// TLS handshake and AUTH can outlast on a first connection.
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			err := l.Driver().(*Driver).Prepare(ctx)
			cancel()
			if c.refusal {
				// Refused for good on every node: a waiting Acquire does
				// not wait out its context (which only attempts whose
				// handshake outlasts the node timeout leave it to).
				ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
				_, aerr := l.Acquire(ctx, uniqueName("refused"))
				waited := ctx.Err() != nil
				cancel()
				if waited || aerr == nil || !strings.Contains(aerr.Error(), c.cause) {
					t.Errorf("%s: Acquire = %v (context ended: %v), want it to give up saying %q", c.what, aerr, waited, c.cause)
				}
			}
			_ = l.Close()
			t.Logf("%s: %v", c.what, err)
			if err == nil || !strings.Contains(err.Error(), c.cause) {
				t.Errorf("%s: Prepare: %v, want an error saying %q", c.what, err, c.cause)
			}
			if err != nil && strings.Contains(err.Error(), nodeLockPW) {
				t.Errorf("%s: the error shows the password: %v", c.what, err)
			}
		}
		locktest.RefusesBadURLs(t, []string{nodeLockPW}, []locktest.BadURL{
			{What: "missing CA file", URL: mk(nodeLockPW, "cacert", pki.Dir+"/absent.pem"), Cause: `"cacert"`},
		})
	})
}
