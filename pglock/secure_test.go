package pglock_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/locktest"
	"github.com/dlockgo/dlock/pglock"
)

// TestSecured: on a PostgreSQL server that accepts only TLS connections
// with a client certificate and a SCRAM password, the role "locks", owner
// of its database and nothing more, passes the conformance suite through
// a postgres:// URL whose TLS parameters (sslmode, sslrootcert, sslcert,
// sslkey) go to pgx untouched; a wrong password, a CA that did not sign
// the server's certificate, a missing client certificate and a plain
// connection each fail to open with an error that names the cause and
// shows no password.
func TestSecured(t *testing.T) {
	pg := testenv.StartSecuredPG(t)
	good := pg.URL(pg.User, pg.Password, pg.Database)
	ctx := testContext(t, 10*time.Second)
	ac, err := pgx.Connect(ctx, pg.URL("postgres", pg.AdminPassword, pg.Database))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ac.Close(context.Background()) })
	adm := &admin{c: ac}

	t.Run("Conformance", func(t *testing.T) {
		locktest.Run(t, locktest.Harness{
			NewLocker: locktest.Opener(good),
			TakeAway: func(t *testing.T, name string) {
				t.Helper()
				adm.terminate(t, pglock.DefaultTable, name)
			},
			TTL:   suiteTTL,
			Crash: func(t *testing.T, l *dlock.Locker) { pglock.Crash(l.Driver().(*pglock.Driver)) },
		})
	})

	t.Run("BadURLs", func(t *testing.T) {
		p := pg.PKI
		with := func(kv ...string) string { return pg.URL(pg.User, pg.Password, pg.Database, kv...) }
		locktest.RefusesBadURLs(t, []string{pg.Password, pg.AdminPassword}, []locktest.BadURL{
			{What: "wrong password", URL: pg.URL(pg.User, "wrong-"+pg.Password, pg.Database), Cause: "password authentication failed"},
			{What: "wrong CA", URL: with("sslrootcert", p.OtherCA), Cause: "certificate signed by unknown authority"},
			{What: "no client certificate", URL: with("sslcert", "", "sslkey", ""), Cause: "certificate"},
			{What: "plain connection", URL: with("sslmode", "disable"), Cause: "no encryption"},
		})
	})
}
