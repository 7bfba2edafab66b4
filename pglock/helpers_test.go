package pglock_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/locktest"
	"github.com/dlockgo/dlock/pglock"
)

// table is this test binary's own token table, dropped when it ends.
var table = "pglock_test_" + randomHex(4)

func TestMain(m *testing.M) {
	code := m.Run()
	if err := dropTable(table); err != nil {
		fmt.Fprintln(os.Stderr, "pglock tests: drop the test table:", err)
	}
	os.Exit(code)
}

func dropTable(t string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, testenv.Getenv("DLOCK_PG_URL", testenv.DefaultPGURL))
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	_, err = c.Exec(ctx, "DROP TABLE IF EXISTS "+t+"; DROP SEQUENCE IF EXISTS "+t+"_seq")
	return err
}

var (
	randomHex   = locktest.RandomHex
	waitUntil   = locktest.Eventually
	testContext = locktest.Context
)

// goTake runs take in a goroutine that sends the lease it gets to got: nil
// when take failed, which fails t.
func goTake(t testing.TB, got chan<- *dlock.Lease, take func() (*dlock.Lease, error)) {
	go func() {
		l, err := take()
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
}

// quiet fails t at once if ch delivers within d: what must not happen yet.
func quiet[T any](t testing.TB, ch <-chan T, d time.Duration, what string) {
	t.Helper()
	select {
	case v := <-ch:
		t.Fatalf("%s (got %v)", what, v)
	case <-time.After(d):
	}
}

// config returns the test server's connection configuration.
func config(t testing.TB) *pgx.ConnConfig {
	t.Helper()
	cfg, err := pgx.ParseConfig(testenv.PGURL(t))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// newDriver opens a driver on the test table with o's other options; it is
// closed when t ends.
func newDriver(t testing.TB, o pglock.Options) *pglock.Driver {
	t.Helper()
	if o.Table == "" {
		o.Table = table
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d, err := pglock.NewDriver(ctx, config(t), &o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

// newLocker is newDriver in a Locker with opts, closed when t ends.
func newLocker(t testing.TB, o pglock.Options, opts ...dlock.Option) *dlock.Locker {
	t.Helper()
	return locktest.New(t, newDriver(t, o), opts...)
}

// admin is a connection of the test's own for looking at and breaking
// sessions; safe for concurrent use.
type admin struct {
	mu sync.Mutex
	c  *pgx.Conn
}

func newAdmin(t testing.TB) *admin { return &admin{c: testenv.PGConn(t)} }

// lockRows returns the pg_locks rows of name's advisory key: the holding
// sessions' pids and the number of waiting requests.
func (a *admin) lockRows(t testing.TB, tbl, name string) (holders []uint32, waiting int) {
	t.Helper()
	return a.keyRows(t, pglock.Key(tbl, name))
}

// keyRows returns the pg_locks rows of the advisory key k: the holding
// sessions' pids and the number of waiting requests.
func (a *admin) keyRows(t testing.TB, k int64) (holders []uint32, waiting int) {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	rows, err := a.c.Query(context.Background(), `SELECT pid, granted FROM pg_locks
WHERE locktype = 'advisory' AND objsubid = 1
AND classid = (($1::bigint >> 32) & 4294967295)::oid AND objid = ($1::bigint & 4294967295)::oid`, k)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var pid uint32
		var granted bool
		if err := rows.Scan(&pid, &granted); err != nil {
			t.Fatal(err)
		}
		if granted {
			holders = append(holders, pid)
		} else {
			waiting++
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return holders, waiting
}

// terminate ends the sessions holding name's lock, as an operator would
// with pg_terminate_backend, and waits (up to 5s) until they are gone.
func (a *admin) terminate(t testing.TB, tbl, name string) {
	t.Helper()
	holders, _ := a.lockRows(t, tbl, name)
	if len(holders) == 0 {
		t.Fatalf("terminate: nobody holds %q", name)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, pid := range holders {
		var ok bool
		if err := a.c.QueryRow(context.Background(), "SELECT pg_terminate_backend($1, 5000)", int32(pid)).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		if !ok {
			t.Fatalf("pg_terminate_backend(%d) did not end the session in 5s", pid)
		}
	}
}

// exec runs sql on the admin connection.
func (a *admin) exec(t testing.TB, sql string, args ...any) {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, err := a.c.Exec(context.Background(), sql, args...); err != nil {
		t.Fatal(err)
	}
}
