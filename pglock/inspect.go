package pglock

import (
	"context"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/dlockgo/dlock/driver"
)

// Inspect implements driver.Inspector: it lists the mutexes and election
// leaders whose names start with prefix, by name, then mode, joining the
// token table with pg_locks in one query (not readers-writer locks and
// semaphores, whose token rows record the last grant only). Owner is the
// holding session ("pid 4242"), Expires is zero, and two names whose keys
// collide (see Key) would both show as held. See docs/CLI.md.
func (d *Driver) Inspect(ctx context.Context, prefix string) ([]driver.LockInfo, error) {
	var out []driver.LockInfo
	err := d.withConn(ctx, func(c *conn) (err error) {
		out, err = d.inspect(ctx, c.pg, prefix)
		return err
	}, func(err error) error { return fmt.Errorf("pglock: inspect: %w", err) })
	return out, err
}

// inspectSQL is Inspect's query: $1 is the prefix, $2 the table hashed in keys.
const inspectSQL = `WITH l AS (
	SELECT (classid::bigint << 32) | objid::bigint AS k, pid, granted
	FROM pg_locks
	WHERE locktype = 'advisory' AND objsubid = 1 AND mode = 'ExclusiveLock'
	AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
), t AS (
	SELECT name, 'dlock/' AS space, name AS row, token, NULL::integer AS holder FROM %[1]s
	WHERE left(name, length($1)) = $1 AND strpos(name, '#') = 0
	UNION ALL
	SELECT substr(name, 8), 'dlock-leader/', name, token, holder FROM %[1]s
	WHERE left(name, 7 + length($1)) = 'leader#' || $1
), k AS (
	SELECT t.*, ('x' || encode(substr(sha256(convert_to(space || $2 || '/' || name, 'UTF8')), 1, 8), 'hex'))::bit(64)::bigint AS k
	FROM t
)
SELECT k.name, k.space = 'dlock-leader/', k.token, h.pid,
	(SELECT count(*) FROM l AS w WHERE w.k = k.k AND NOT w.granted)
FROM k JOIN l AS h ON h.k = k.k AND h.granted AND (k.holder IS NULL OR h.pid = k.holder)
ORDER BY k.name COLLATE "C", 2`

func (d *Driver) inspect(ctx context.Context, c *pgx.Conn, prefix string) ([]driver.LockInfo, error) {
	rows, err := c.Query(ctx, fmt.Sprintf(inspectSQL, d.st.table), prefix, d.st.table)
	if err != nil {
		return nil, err
	}
	var out []driver.LockInfo
	for rows.Next() {
		var (
			name    string
			leader  bool
			token   int64
			pid     int32
			waiters int64
		)
		if err := rows.Scan(&name, &leader, &token, &pid, &waiters); err != nil {
			rows.Close()
			return nil, err
		}
		info := driver.LockInfo{Name: name, Mode: driver.Exclusive, Token: uint64(token), Owner: "pid " + strconv.Itoa(int(pid)), Waiters: int(waiters)}
		if leader {
			info.Mode = driver.Leader
		}
		out = append(out, info)
	}
	return out, rows.Err()
}
