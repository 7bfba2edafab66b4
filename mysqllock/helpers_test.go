package mysqllock_test

import (
	"context"
	"database/sql"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/locktest"
	"github.com/dlockgo/dlock/mysqllock"
)

// sockets records the network connections of a *sql.DB, so that a test
// can cut them all as a crashing process would.
type sockets struct {
	mu    sync.Mutex
	conns []net.Conn
}

// cut closes every connection without a word to the server.
func (s *sockets) cut() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.conns {
		_ = c.Close()
	}
	s.conns = nil
}

// newDB opens a *sql.DB of its own on the test server, as another process
// would; its connections are recorded in s when s is not nil. It is
// closed when t ends.
func newDB(t testing.TB, s *sockets) *sql.DB {
	t.Helper()
	cfg, err := testenv.MySQLConfig(testenv.MySQLDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	if s != nil {
		cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
			var d net.Dialer
			c, err := d.DialContext(ctx, network, addr)
			if err == nil {
				s.mu.Lock()
				s.conns = append(s.conns, c)
				s.mu.Unlock()
			}
			return c, err
		}
	}
	c, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(c)
	db.SetMaxIdleConns(16)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// testTable returns a table name of the test's own, dropped when t ends.
func testTable(t testing.TB) string {
	t.Helper()
	table := "dlock_test_" + randomHex(4)
	db := newDB(t, nil)
	t.Cleanup(func() { _, _ = db.Exec("DROP TABLE IF EXISTS " + table) })
	return table
}

// newLocker returns a Locker on a *sql.DB of its own, as lockerOn does,
// and its driver.
func newLocker(t testing.TB, o mysqllock.Options, opts ...dlock.Option) (*dlock.Locker, *mysqllock.Driver) {
	t.Helper()
	l := lockerOn(t, newDB(t, nil), o, opts...)
	return l, l.Driver().(*mysqllock.Driver)
}

// lockerOn returns a Locker on db, with the options o (the table is filled
// in when empty) and the Locker options opts; it is closed when t ends.
func lockerOn(t testing.TB, db *sql.DB, o mysqllock.Options, opts ...dlock.Option) *dlock.Locker {
	t.Helper()
	if o.Table == "" {
		o.Table = testTable(t)
	}
	return locktest.Opened(t)(mysqllock.New(db, &o, opts...))
}

// admin runs the operator's side of the tests on a connection pool of
// its own.
type admin struct {
	t  testing.TB
	db *sql.DB
}

func newAdmin(t testing.TB) *admin { return &admin{t: t, db: newDB(t, nil)} }

// holder returns the id of the connection that holds the server-side lock
// key, or 0.
func (a *admin) holder(key string) int64 {
	a.t.Helper()
	var id sql.NullInt64
	if err := a.db.QueryRow("SELECT IS_USED_LOCK(?)", key).Scan(&id); err != nil {
		a.t.Fatal(err)
	}
	return id.Int64
}

// kill kills connection id, which frees its locks.
func (a *admin) kill(id int64) {
	a.t.Helper()
	if _, err := a.db.Exec("KILL ?", id); err != nil {
		a.t.Fatalf("KILL %d: %v", id, err)
	}
}

// waiters counts the connections queued on the server-side lock key.
func (a *admin) waiters(key string) int {
	a.t.Helper()
	var n int
	err := a.db.QueryRow("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE STATE = 'User lock' AND INFO LIKE ?",
		"%GET_LOCK('"+key+"'%").Scan(&n)
	if err != nil {
		a.t.Fatal(err)
	}
	return n
}

// alive reports whether connection id still exists on the server.
func (a *admin) alive(id int64) bool {
	a.t.Helper()
	var n int
	if err := a.db.QueryRow("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ?", id).Scan(&n); err != nil {
		a.t.Fatal(err)
	}
	return n > 0
}

var (
	eventually  = locktest.Eventually
	randomHex   = locktest.RandomHex
	testContext = locktest.Context
)

// requestFor is a driver request for name with a fixed owner.
func requestFor(name string) driver.Request {
	return driver.Request{Name: name, Owner: "0123456789abcdef0123456789abcdef", TTL: time.Second}
}

// securedAdmin opens a *sql.DB of the secured server's administrator,
// over TLS with the PKI's client certificate, closed when t ends.
func securedAdmin(t testing.TB, my *testenv.SecuredMySQL) *sql.DB {
	t.Helper()
	cfg := mysql.NewConfig()
	cfg.User, cfg.Passwd, cfg.Net, cfg.Addr, cfg.DBName = my.Admin, my.AdminPassword, "tcp", my.Addr, my.Database
	cfg.TLS = my.PKI.ClientTLS(t)
	c, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(c)
	t.Cleanup(func() { _ = db.Close() })
	return db
}
