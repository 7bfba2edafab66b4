package mysqllock_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/locktest"
	"github.com/dlockgo/dlock/mysqllock"
)

// The benchmarks run against the test server (DLOCK_MYSQL_DSN). ns/op is
// the time of one acquire+release; for Contended8 it is wall time per
// acquisition with 8 contenders, so 1e9/ns is the handoff rate. Each
// compares a dlock.Locker with bare GET_LOCK/RELEASE_LOCK on a checked-out
// connection ("raw"), which has no fencing token and no keep-alive.
// "mysqllock" runs on a pool the driver treats as the caller's (it saves
// and restores the session's wait_timeout around each lock), and
// "exclusive" on one with Options.ExclusivePool, and "url" on the pool a
// mysql:// URL makes (exclusive, its sockets watched).

// A mode is one of the ways the driver gets its pool.
type mode struct {
	name           string
	exclusive, url bool
}

// modes are the driver's pool modes.
var modes = []mode{{"mysqllock", false, false}, {"exclusive", true, false}, {"url", true, true}}

// locker returns a Locker of mode m on the token table (a new one when
// empty), closed when b ends.
func (m mode) locker(b *testing.B, table string) *dlock.Locker {
	b.Helper()
	if !m.url {
		l, _ := newLocker(b, mysqllock.Options{Table: table, ExclusivePool: m.exclusive})
		return l
	}
	if table == "" {
		table = testTable(b)
	}
	l, err := dlock.Open(context.Background(), serverURL(b, "table="+table))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = l.Close() })
	return l
}

func BenchmarkUncontended(b *testing.B) {
	ctx := context.Background()
	for _, m := range modes {
		b.Run(m.name, func(b *testing.B) {
			locktest.BenchCycle(b, ctx, locktest.Kind(m.locker(b, ""), "mutex", "u"))
		})
	}
	b.Run("raw", func(b *testing.B) {
		db := newDB(b, nil)
		locktest.BenchLoop(b, func() error { return rawLock(ctx, db, "raw:u") })
	})
}

// BenchmarkRoundTrips measures what one round trip costs next to the
// fencing token's durable write: GET_LOCK and the counter upsert as two
// statements, and as one multi-statement query (which needs
// multiStatements in the DSN, and cannot make the upsert depend on
// GET_LOCK's result). The lock is released outside the timed part.
func BenchmarkRoundTrips(b *testing.B) {
	ctx := context.Background()
	table := testTable(b)
	d, err := mysqllock.NewDriver(newDB(b, nil), &mysqllock.Options{Table: table})
	if err != nil {
		b.Fatal(err)
	}
	if err := d.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	upsert := "INSERT INTO " + table + " (name, token) VALUES ('rt', LAST_INSERT_ID(1)) ON DUPLICATE KEY UPDATE token = LAST_INSERT_ID(token + 1)"
	run := func(b *testing.B, db *sql.DB, take func(c *sql.Conn) error) {
		c, err := db.Conn(ctx)
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		b.ReportAllocs()
		for b.Loop() {
			if err := take(c); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			if _, err := c.ExecContext(ctx, "DO RELEASE_LOCK('rt')"); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
	}
	b.Run("two-statements", func(b *testing.B) {
		run(b, newDB(b, nil), func(c *sql.Conn) error {
			var got, id int64
			if err := c.QueryRowContext(ctx, "SELECT GET_LOCK('rt', 0), CONNECTION_ID()").Scan(&got, &id); err != nil {
				return err
			}
			_, err := c.ExecContext(ctx, upsert)
			return err
		})
	})
	b.Run("multi-statement", func(b *testing.B) {
		cfg, err := testenv.MySQLConfig(testenv.MySQLDSN(b))
		if err != nil {
			b.Fatal(err)
		}
		cfg.MultiStatements = true
		conn, err := mysql.NewConnector(cfg)
		if err != nil {
			b.Fatal(err)
		}
		db := sql.OpenDB(conn)
		defer db.Close()
		run(b, db, func(c *sql.Conn) error {
			rows, err := c.QueryContext(ctx, "SELECT GET_LOCK('rt', 0), CONNECTION_ID(); "+upsert)
			if err != nil {
				return err
			}
			for rows.Next() {
			}
			for rows.NextResultSet() {
			}
			return rows.Close()
		})
	})
}

func BenchmarkParallelNames(b *testing.B) {
	const goroutines = 16
	ctx := context.Background()
	for _, m := range modes {
		b.Run(m.name, func(b *testing.B) {
			l := m.locker(b, "")
			locktest.Warm(b, l, "p")
			locktest.BenchParallel(b, goroutines, "p", func(name string) error { return locktest.Cycle(ctx, l, name) })
		})
	}
	b.Run("raw", func(b *testing.B) {
		db := newDB(b, nil)
		db.SetMaxIdleConns(2 * goroutines)
		locktest.BenchParallel(b, goroutines, "p", func(name string) error { return rawLock(ctx, db, "raw:"+name) })
	})
}

// BenchmarkContended8: 8 contenders, each with a *sql.DB of its own, take
// one lock in turn; nearly every acquisition is a handoff to a waiter.
func BenchmarkContended8(b *testing.B) {
	const contenders = 8
	ctx := context.Background()
	for _, m := range modes {
		b.Run(m.name, func(b *testing.B) {
			table := testTable(b)
			lockers := make([]*dlock.Locker, contenders)
			for g := range lockers {
				lockers[g] = m.locker(b, table)
				locktest.Warm(b, lockers[g], "c")
			}
			locktest.BenchContend(b, ctx, contenders, locktest.Acquirers(lockers, "c"))
		})
	}
	b.Run("raw", func(b *testing.B) {
		dbs := make([]*sql.DB, contenders)
		for g := range dbs {
			dbs[g] = newDB(b, nil)
		}
		locktest.BenchContend(b, ctx, contenders, func(ctx context.Context, g int) (locktest.Held, error) {
			return rawWait(ctx, dbs[g])
		})
	})
}

// rawLock takes and releases key with bare GET_LOCK and RELEASE_LOCK on a
// checked-out connection.
func rawLock(ctx context.Context, db *sql.DB, key string) error {
	c, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	var got int64
	if err := c.QueryRowContext(ctx, "SELECT GET_LOCK(?, 0)", key).Scan(&got); err != nil {
		return err
	}
	_, err = c.ExecContext(ctx, "DO RELEASE_LOCK(?)", key)
	return err
}

// rawKey is the lock that rawWait takes.
const rawKey = "raw:c"

// rawHeld is rawKey held on a checked-out connection.
type rawHeld struct{ c *sql.Conn }

// Release releases rawKey and gives the connection back.
func (h rawHeld) Release(ctx context.Context) error {
	defer h.c.Close()
	_, err := h.c.ExecContext(ctx, "DO RELEASE_LOCK(?)", rawKey)
	return err
}

// rawWait takes rawKey with bare GET_LOCK on a checked-out connection,
// waiting on the server for the lock.
func rawWait(ctx context.Context, db *sql.DB) (locktest.Held, error) {
	c, err := db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	var got int64
	if err := c.QueryRowContext(ctx, "SELECT GET_LOCK(?, 30)", rawKey).Scan(&got); err != nil {
		_ = c.Close()
		return nil, err
	}
	return rawHeld{c}, nil
}
