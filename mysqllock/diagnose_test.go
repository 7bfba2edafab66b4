package mysqllock_test

import (
	"context"
	"testing"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/locktest"
	"github.com/dlockgo/dlock/mysqllock"
)

// TestDiagnose: Diagnose (dlock doctor's checks) passes the test server,
// and fails a server set read-only (read_only=ON, as on a replica) for a
// user it applies to: a private MariaDB, since read_only is global.
func TestDiagnose(t *testing.T) {
	const ttl = 10 * time.Second
	_, d := newLocker(t, mysqllock.Options{})
	fs := locktest.Diagnose(t, d, ttl)
	locktest.NoFail(t, fs)
	locktest.WantFinding(t, fs, "read-only", driver.OK, "writable")
	locktest.WantFinding(t, fs, "token table", driver.OK, "does not exist; the first grant creates it")

	my := testenv.StartSecuredMySQL(t)
	admin := securedAdmin(t, my)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := admin.ExecContext(ctx, "SET GLOBAL read_only = ON"); err != nil {
		t.Fatal(err)
	}
	l := locktest.Opened(t)(dlock.Open(ctx, my.URL(my.User, my.Password)))
	fs = locktest.Diagnose(t, l.Driver().(driver.Diagnoser), ttl)
	locktest.WantFinding(t, fs, "read-only", driver.Fail, "read_only ON")
}
