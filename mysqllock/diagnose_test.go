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

// TestDiagnose: Diagnose (dlock doctor's checks) passes the test server;
// on a private MariaDB (read_only is global), it passes a user who may
// write the token table, fails one who may only read it, and fails a
// server set read-only (read_only=ON, as on a replica) for a user it
// applies to.
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
	// The lock user may write the token table, which its first lock
	// made: the grant's write, tried and rolled back, succeeds and
	// leaves no row; a user who may only read it fails.
	l := locktest.Opened(t)(dlock.Open(ctx, my.URL(my.User, my.Password)))
	if err := locktest.Must(t)(l.Acquire(ctx, "doctor/first")).Release(ctx); err != nil {
		t.Fatal(err)
	}
	fs = locktest.Diagnose(t, l.Driver().(driver.Diagnoser), ttl)
	locktest.NoFail(t, fs)
	locktest.WantFinding(t, fs, "token table", driver.OK, "a grant's write to it succeeds")
	var left int
	if err := admin.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+my.Database+".dlock_tokens WHERE name = '#doctor'").Scan(&left); err != nil || left != 0 {
		t.Errorf("the tried write left %d rows (%v)", left, err)
	}
	for _, q := range []string{
		"CREATE USER 'reader'@'127.0.0.1' IDENTIFIED BY 'reader-pw-3f1a' REQUIRE SSL",
		"GRANT SELECT ON " + my.Database + ".* TO 'reader'@'127.0.0.1'",
	} {
		if _, err := admin.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	reader := locktest.Opened(t)(dlock.Open(ctx, my.URL("reader", "reader-pw-3f1a")))
	fs = locktest.Diagnose(t, reader.Driver().(driver.Diagnoser), ttl)
	locktest.WantFinding(t, fs, "token table", driver.Fail, "a grant's write to it fails")

	if _, err := admin.ExecContext(ctx, "SET GLOBAL read_only = ON"); err != nil {
		t.Fatal(err)
	}
	fs = locktest.Diagnose(t, l.Driver().(driver.Diagnoser), ttl)
	locktest.WantFinding(t, fs, "read-only", driver.Fail, "read_only ON")
}
