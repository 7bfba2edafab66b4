package pglock_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/locktest"
	"github.com/dlockgo/dlock/pglock"
)

// TestDiagnose: Diagnose (dlock doctor's checks) passes the test server,
// reads a missing token table as one the role may create, fails a
// session whose transactions are read-only (default_transaction_read_only,
// set for the connection as a role or database setting would), and fails
// a hot standby streaming from a private primary, which the primary
// passes.
func TestDiagnose(t *testing.T) {
	const ttl = 10 * time.Second
	fs := locktest.Diagnose(t, newDriver(t, pglock.Options{}), ttl)
	locktest.NoFail(t, fs)
	locktest.WantFinding(t, fs, "standby", driver.OK, "a primary")
	locktest.WantFinding(t, fs, "read-only session", driver.OK, "off")
	locktest.WantFinding(t, fs, "token table", driver.OK, "with SELECT, INSERT, UPDATE and USAGE")

	missing := "dlock_doctor_" + randomHex(4)
	fs = locktest.Diagnose(t, newDriver(t, pglock.Options{Table: missing, NoMigrate: true}), ttl)
	locktest.WantFinding(t, fs, "token table", driver.OK, missing+" does not exist; the role may create it")

	cfg := config(t)
	cfg.RuntimeParams["default_transaction_read_only"] = "on"
	d, err := pglock.NewDriver(t.Context(), cfg, &pglock.Options{Table: table, NoMigrate: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	fs = locktest.Diagnose(t, d, ttl)
	locktest.WantFinding(t, fs, "read-only session", driver.Fail, "default_transaction_read_only on")

	pair := testenv.StartPGStandby(t)
	open := func(url string) *pglock.Driver {
		cfg, err := pgx.ParseConfig(url)
		if err != nil {
			t.Fatal(err)
		}
		d, err := pglock.NewDriver(t.Context(), cfg, &pglock.Options{NoMigrate: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = d.Close() })
		return d
	}
	fs = locktest.Diagnose(t, open(pair.Primary), ttl)
	locktest.WantFinding(t, fs, "standby", driver.OK, "a primary")
	fs = locktest.Diagnose(t, open(pair.Standby), ttl)
	locktest.WantFinding(t, fs, "standby", driver.Fail, "a standby in recovery")
}
