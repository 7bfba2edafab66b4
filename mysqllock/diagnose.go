package mysqllock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/internal/doctor"
)

// Diagnose implements driver.Diagnoser on one connection of the pool:
// the round trip and the server's clock (NOW(6)), whether the server is
// read-only (read_only, super_read_only, transaction_read_only: a
// replica), and the token table. It only reads.
func (d *Driver) Diagnose(ctx context.Context, ttl time.Duration) ([]driver.Finding, error) {
	c, err := d.db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("mysqllock: %w", err)
	}
	defer c.Close()
	fs, err := doctor.Clock(ctx, ttl, "docs/MYSQL.md", func(ctx context.Context) (time.Time, error) {
		var s string
		if err := c.QueryRowContext(ctx, "SELECT UNIX_TIMESTAMP(NOW(6))").Scan(&s); err != nil {
			return time.Time{}, err
		}
		sec, frac, _ := strings.Cut(s, ".")
		secs, err := strconv.ParseInt(sec, 10, 64)
		if err != nil {
			return time.Time{}, fmt.Errorf("NOW(6) as %q: %w", s, err)
		}
		us, _ := strconv.ParseInt((frac + "000000")[:6], 10, 64)
		return time.Unix(secs, us*1000), nil
	})
	if err != nil {
		return nil, fmt.Errorf("mysqllock: %w", err)
	}
	vars, err := variables(ctx, c, "version", "read_only", "super_read_only", "transaction_read_only", "tx_read_only")
	if err != nil {
		return nil, fmt.Errorf("mysqllock: %w", err)
	}
	const doc = "docs/MYSQL.md#doctor"
	var on []string
	for _, k := range []string{"read_only", "super_read_only", "transaction_read_only", "tx_read_only"} {
		if v, ok := vars[k]; ok && (v == "ON" || v == "1") {
			on = append(on, k)
		}
	}
	f := driver.Finding{Check: "read-only", Found: "writable, " + vars["version"], Doc: doc}
	if len(on) > 0 {
		f.Severity = driver.Fail
		f.Found = strings.Join(on, ", ") + " ON, " + vars["version"]
		f.Why = "A read-only server is a replica, or one set aside: GET_LOCK works on it but excludes no one on the primary, " +
			"and the fencing token's writes fail (or, for a user that bypasses read_only, go to a server nobody else reads)"
		f.Fix = "Point the URL at the primary (SET GLOBAL read_only = OFF only if this server is the primary)"
	}
	fs = append(fs, f)
	return append(fs, d.tableFinding(ctx, c, doc)), nil
}

// tableFinding reports whether the token table exists; a missing one is
// created by the first grant, which needs the CREATE privilege.
func (d *Driver) tableFinding(ctx context.Context, c *sql.Conn, doc string) driver.Finding {
	f := driver.Finding{Check: "token table", Doc: doc}
	var n int
	var schema sql.NullString // the connection's database unless the name has one
	table := d.table
	if s, t, ok := strings.Cut(d.table, "."); ok {
		schema, table = sql.NullString{String: s, Valid: true}, t
	}
	err := c.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = COALESCE(?, DATABASE()) AND table_name = ?",
		schema, table).Scan(&n)
	switch {
	case err != nil:
		f.Severity, f.Found = driver.Warn, "cannot read: "+err.Error()
		f.Why = "Whether grants can write their fencing tokens is not known"
	case n > 0:
		// The grant's own upsert, of a name no lock has, rolled back: the
		// privileges a grant needs (INSERT, UPDATE), tried, not read from
		// grant tables that roles and wildcards make hard to judge.
		err = tryBump(ctx, c, d.sql.bump+literal("#doctor")+bumpEnd)
		f.Found = d.table + " exists; a grant's write to it succeeds (rolled back)"
		if err != nil {
			f.Severity = driver.Fail
			f.Found = d.table + " exists, but a grant's write to it fails: " + err.Error()
			f.Why = "Every grant writes its fencing token there: each acquisition fails"
			f.Fix = "GRANT SELECT, INSERT, UPDATE ON " + d.table + " TO the user"
			if me := (*mysql.MySQLError)(nil); errors.As(err, &me) && (me.Number == 1290 || me.Number == 1792) {
				f.Fix = "Point the URL at a writable primary (see the read-only finding)"
			}
		}
	default:
		f.Found = d.table + " does not exist; the first grant creates it (CREATE privilege), or Migrate does beforehand"
	}
	return f
}

// tryBump runs bump in a transaction of its own on c and rolls it back.
func tryBump(ctx context.Context, c *sql.Conn, bump string) error {
	tx, err := c.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, bump)
	return errors.Join(err, tx.Rollback())
}

// variables returns the server variables named that exist.
func variables(ctx context.Context, c *sql.Conn, names ...string) (map[string]string, error) {
	rows, err := c.QueryContext(ctx, "SHOW VARIABLES WHERE Variable_name IN ('"+strings.Join(names, "', '")+"')")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	vars := map[string]string{}
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			return nil, err
		}
		vars[k] = v
	}
	return vars, rows.Err()
}
