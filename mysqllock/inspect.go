package mysqllock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/go-sql-driver/mysql"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
)

// inspectBatch is how many names one of Inspect's queries asks about.
const inspectBatch = 200

// Inspect implements driver.Inspector: it lists the held locks whose names
// start with prefix, by name, from the token table's names and
// IS_USED_LOCK. Owner is the holding connection ("connection 42"); Token
// is the name's counter, for a moment after a grant still the previous
// holder's; Waiters counts the GET_LOCK statements waiting in the process
// list, one per waiting driver, or is -1 without the PROCESS privilege;
// Expires is zero. See docs/CLI.md, dlock status.
func (d *Driver) Inspect(ctx context.Context, prefix string) ([]driver.LockInfo, error) {
	if err := d.begin(); err != nil {
		return nil, err
	}
	defer d.wg.Done()
	for i := 0; i < len(prefix); i++ {
		if !driver.NameByte(prefix[i]) {
			return nil, nil // no name starts with it
		}
	}
	table, err := quoteTable(d.table)
	if err != nil {
		return nil, err
	}
	names, err := d.names(ctx, table, prefix)
	if err != nil {
		return nil, err
	}
	var out []driver.LockInfo
	for batch := range slices.Chunk(names, inspectBatch) {
		infos, err := d.inspect(ctx, table, batch)
		if err != nil {
			return nil, err
		}
		out = append(out, infos...)
	}
	slices.SortFunc(out, func(a, b driver.LockInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// names returns the valid lock names in table that start with prefix.
func (d *Driver) names(ctx context.Context, table, prefix string) ([]string, error) {
	q := "SELECT name FROM " + table + " WHERE LEFT(name, " + strconv.Itoa(len(prefix)) + ") = " + literal(prefix)
	rows, err := d.db.QueryContext(ctx, q)
	if me, ok := errors.AsType[*mysql.MySQLError](err); ok && me.Number == erNoSuchTable {
		return nil, nil // no lock was ever taken
	}
	if err != nil {
		return nil, fmt.Errorf("mysqllock: inspect: %w", err)
	}
	defer rows.Close()
	var names []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return nil, fmt.Errorf("mysqllock: inspect: %w", err)
		}
		if dlock.ValidateName(name) == nil {
			names = append(names, name)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("mysqllock: inspect: %w", err)
	}
	return names, nil
}

// inspectSQL asks, for each name of a derived table n(i, name, k) of
// lock names and server-side names, who holds the lock, its counter, and
// (with the PROCESS privilege) how many GET_LOCK calls wait for it; only
// held locks give a row.
const inspectSQL = `SELECT n.i, IS_USED_LOCK(n.k), t.token,
IF(EXISTS (SELECT 1 FROM information_schema.USER_PRIVILEGES WHERE PRIVILEGE_TYPE = 'PROCESS'
	AND GRANTEE = CONCAT('''', SUBSTRING_INDEX(CURRENT_USER(), '@', 1), '''@''', SUBSTRING_INDEX(CURRENT_USER(), '@', -1), '''')),
	(SELECT COUNT(*) FROM information_schema.PROCESSLIST AS p
	WHERE p.STATE = 'User lock' AND LOCATE(CONCAT('GET_LOCK(''', n.k, ''''), p.INFO) > 0), NULL)
FROM (%s) AS n JOIN %s AS t ON t.name = n.name
WHERE IS_USED_LOCK(n.k) IS NOT NULL`

// inspect returns the held locks among names, with counters from table.
func (d *Driver) inspect(ctx context.Context, table string, names []string) ([]driver.LockInfo, error) {
	var b strings.Builder
	for i, name := range names {
		if i > 0 {
			b.WriteString(" UNION ALL ")
		}
		fmt.Fprintf(&b, "SELECT %d AS i, %s AS name, %s AS k", i, literal(name), literal(d.LockName(name)))
	}
	rows, err := d.db.QueryContext(ctx, fmt.Sprintf(inspectSQL, b.String(), table))
	if err != nil {
		return nil, fmt.Errorf("mysqllock: inspect: %w", err)
	}
	defer rows.Close()
	var out []driver.LockInfo
	for rows.Next() {
		var (
			i       int
			conn    int64
			token   uint64
			waiters sql.NullInt64
		)
		if err := rows.Scan(&i, &conn, &token, &waiters); err != nil {
			return nil, fmt.Errorf("mysqllock: inspect: %w", err)
		}
		if i < 0 || i >= len(names) {
			return nil, fmt.Errorf("mysqllock: inspect: the server returned row %d of %d", i, len(names))
		}
		info := driver.LockInfo{Name: names[i], Mode: driver.Exclusive, Token: token, Owner: "connection " + strconv.FormatInt(conn, 10), Waiters: -1}
		if waiters.Valid {
			info.Waiters = int(waiters.Int64)
		}
		out = append(out, info)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("mysqllock: inspect: %w", err)
	}
	return out, nil
}
