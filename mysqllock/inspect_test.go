package mysqllock_test

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/mysqllock"
)

// Inspect lists the held locks under a prefix (escaped and hashed
// server-side names included) with the tokens of their grants, the
// holding connections and the waiting ones, and nothing released,
// elsewhere or of another table; without the PROCESS privilege the
// waiters are unknown.
func TestInspect(t *testing.T) {
	ctx := testContext(t, 60*time.Second)
	o := mysqllock.Options{Table: testTable(t)}
	l, d := newLocker(t, o)
	_, other := newLocker(t, o)
	stranger, _ := newLocker(t, mysqllock.Options{Table: testTable(t)})
	adm := newAdmin(t)

	take := func(lease *dlock.Lease, err error) *dlock.Lease {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return lease
	}
	long := "jobs/" + strings.Repeat("x", 80) // hashed on the server
	a := take(l.Acquire(ctx, "jobs/a"))
	upper := take(l.Acquire(ctx, "jobs/B"))
	hashed := take(l.Acquire(ctx, long))
	gone := take(l.Acquire(ctx, "jobs/b"))
	if err := gone.Release(ctx); err != nil {
		t.Fatal(err)
	}
	take(l.Acquire(ctx, "elsewhere"))
	take(stranger.Acquire(ctx, "jobs/c"))

	// Two waiters queue behind jobs/a, from two Lockers: of one Locker's
	// waiters for a name, one at a time waits on the server.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	waiting := make(chan error, 2)
	second, _ := newLocker(t, o)
	for _, w := range []*dlock.Locker{l, second} {
		go func() { _, err := w.Acquire(wctx, "jobs/a"); waiting <- err }()
	}
	if !eventually(5*time.Second, func() bool { return adm.waiters(d.LockName("jobs/a")) == 2 }) {
		t.Fatal("the waiters did not queue")
	}

	conn := func(name string) string { return fmt.Sprintf("connection %d", adm.holder(d.LockName(name))) }
	want := []driver.LockInfo{
		{Name: "jobs/B", Mode: driver.Exclusive, Token: upper.Token(), Owner: conn("jobs/B"), Waiters: 0},
		{Name: "jobs/a", Mode: driver.Exclusive, Token: a.Token(), Owner: conn("jobs/a"), Waiters: 2},
		{Name: long, Mode: driver.Exclusive, Token: hashed.Token(), Owner: conn(long), Waiters: 0},
	}
	got, err := other.Inspect(ctx, "jobs/")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Errorf("Inspect(jobs/) =\n%+v, want\n%+v", got, want)
	}

	testenv.CheckInspectNames(t, ctx, other, []testenv.PrefixNames{
		{Prefix: "jobs/a", Names: []string{"jobs/a"}},
		{Prefix: "else", Names: []string{"elsewhere"}},
		{Prefix: "", Names: []string{"elsewhere", "jobs/B", "jobs/a", long}},
		{Prefix: "nothing"},
		{Prefix: "jobs/'"},
	})

	// An account without the PROCESS privilege sees the holders, but
	// cannot count the waiters.
	limited := limitedDriver(t, adm, o)
	got, err = limited.Inspect(ctx, "jobs/a")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Token != a.Token() || got[0].Owner != conn("jobs/a") || got[0].Waiters != -1 {
		t.Errorf("Inspect(jobs/a) without PROCESS = %+v, want token %d, %s, waiters -1", got, a.Token(), conn("jobs/a"))
	}
	cancel()
	for range 2 {
		<-waiting
	}
}

// limitedDriver returns a driver on o's table for an account of its own
// that has no PROCESS privilege; the account is dropped when t ends.
func limitedDriver(t *testing.T, adm *admin, o mysqllock.Options) *mysqllock.Driver {
	t.Helper()
	cfg, err := testenv.MySQLConfig(testenv.MySQLDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	user := "dlock_" + randomHex(4)
	host := "'" + user + "'@'%'"
	for _, q := range []string{
		"CREATE USER " + host,
		"GRANT SELECT, INSERT, UPDATE, CREATE ON `" + cfg.DBName + "`.* TO " + host,
	} {
		if _, err := adm.db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	t.Cleanup(func() { _, _ = adm.db.Exec("DROP USER " + host) })
	cfg.User, cfg.Passwd = user, ""
	c, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(c)
	t.Cleanup(func() { _ = db.Close() })
	d, err := mysqllock.NewDriver(db, &o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}
