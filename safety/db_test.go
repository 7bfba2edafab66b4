package safety

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/dlockgo/dlock/internal/testenv"
)

// killer kills the lock holder's connection right after each grant
// (through kill, which reports whether it found the holder), then lets
// the clients work for gap.
func killer(t *testing.T, hold, gap time.Duration, kill func(context.Context) (bool, error)) (func(context.Context, *workers), *int) {
	killed := new(int)
	return func(ctx context.Context, w *workers) {
		for {
			if _, ok := nextFresh(ctx, w, hold); !ok {
				return
			}
			ok, err := kill(ctx)
			if err != nil && ctx.Err() == nil {
				t.Errorf("kill the holder's connection: %v", err)
				return
			}
			if ok {
				*killed++
			}
			if !sleepCtx(ctx, gap) {
				return
			}
		}
	}, killed
}

// TestKilledConnection kills the lock holder's database connection right
// after a grant: pg_terminate_backend on PostgreSQL, KILL on MySQL/MariaDB
// (only the connections of this test's workers, found by the lock they
// hold). The session lock goes with the connection, so another client is
// granted the lock while the holder works; the holder learns of it by its
// connection's failure.
func TestKilledConnection(t *testing.T) {
	const ttl, hold = 500 * time.Millisecond, 500 * time.Millisecond
	base := workload{clients: 3, dur: scale(4*time.Second, 15*time.Second), ttl: ttl, hold: hold, guard: true}
	t.Run("postgres", func(t *testing.T) {
		app := fmt.Sprintf("dlock-safety-%d", time.Now().UnixNano())
		admin := testenv.PGConn(t)
		inject, killed := killer(t, hold, time.Second, func(ctx context.Context) (bool, error) {
			var n int
			err := admin.QueryRow(ctx, `SELECT count(pg_terminate_backend(l.pid))
				FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
				WHERE l.locktype = 'advisory' AND l.granted AND a.application_name = $1`, app).Scan(&n)
			return n > 0, err
		})
		wl := base
		wl.url = withParam(testenv.PGURL(t), "application_name="+app)
		r, _ := run(t, wl, inject)
		report(t, "postgres", "pg_terminate_backend on the holder's connection", true, 1, r)
		checkKilled(t, r, *killed)
	})
	t.Run("mysql", func(t *testing.T) {
		db := testenv.MySQLDB(t)
		name := fmt.Sprintf("safety-%d", time.Now().UnixNano())
		inject, killed := killer(t, hold, time.Second, func(ctx context.Context) (bool, error) {
			var id sql.NullInt64
			if err := db.QueryRowContext(ctx, "SELECT IS_USED_LOCK(?)", "dlock:"+name).Scan(&id); err != nil {
				return false, err
			}
			if !id.Valid {
				return false, nil
			}
			_, err := db.ExecContext(ctx, fmt.Sprintf("KILL %d", id.Int64))
			return err == nil, err
		})
		wl := base
		wl.url, wl.name = testenv.MySQLURL(t), name
		r, _ := run(t, wl, inject)
		report(t, "mysql (MariaDB)", "KILL on the holder's connection", true, 1, r)
		checkKilled(t, r, *killed)
	})
}

func checkKilled(t *testing.T, r Result, killed int) {
	t.Helper()
	if killed == 0 {
		t.Error("no holder's connection was killed: the fault never hit")
	}
	wantZero(t, r.Regressions, "token regressions")
}
