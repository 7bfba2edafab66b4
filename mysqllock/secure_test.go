package mysqllock_test

import (
	"testing"

	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/locktest"
)

// TestSecured: on a MariaDB server with require_secure_transport, the
// user "locks", which must present a client certificate (REQUIRE X509)
// and may use its database only, passes the conformance suite through a
// mysql:// URL whose cacert, cert and key name the TLS files; a wrong
// password, a CA that did not sign the server's certificate, a missing
// client certificate and a plain connection each fail to open with an
// error that names the cause and shows no password.
func TestSecured(t *testing.T) {
	my := testenv.StartSecuredMySQL(t)
	db := securedAdmin(t, my)

	t.Run("Conformance", func(t *testing.T) {
		runSuiteAs(t, &admin{t: t, db: db}, locktest.Opener(my.URL(my.User, my.Password)))
	})
	t.Run("BadURLs", func(t *testing.T) {
		locktest.RefusesBadURLs(t, []string{my.Password, my.AdminPassword}, []locktest.BadURL{
			{What: "wrong password", URL: my.URL(my.User, "wrong-"+my.Password), Cause: "access denied"},
			{What: "wrong CA", URL: my.URL(my.User, my.Password, "cacert", my.PKI.OtherCA), Cause: "certificate signed by unknown authority"},
			{What: "no client certificate", URL: my.URL(my.User, my.Password, "cert", "", "key", ""), Cause: "access denied"},
			{What: "plain connection", URL: my.URL(my.User, my.Password, "cacert", "", "cert", "", "key", ""), Cause: "access denied"},
			{What: "tls=skip-verify with cacert", URL: my.URL(my.User, my.Password, "tls", "skip-verify"), Cause: `"tls"`},
		})
	})
}
