package mysqllock

import (
	"context"
	"fmt"
	"strings"
)

// statements are the driver's SQL texts that depend on its table.
type statements struct {
	create string // CREATE TABLE IF NOT EXISTS
	bump   string // the counter upsert, before the quoted name and bumpEnd
}

// A name's counter advances while its lock is held, in one statement
// whose OK packet carries the new value (LAST_INSERT_ID(expr) sets the
// reported insert id). A new row starts from the server's clock in
// microseconds, not 1, so that tokens go on increasing after a row is
// deleted (see Fencing token in docs/MYSQL.md).
const (
	createTable = "CREATE TABLE IF NOT EXISTS %s (\n" +
		"  name VARBINARY(255) NOT NULL PRIMARY KEY,\n" +
		"  token BIGINT UNSIGNED NOT NULL\n" +
		") ENGINE=InnoDB"
	bumpStart = "INSERT INTO %s (name, token) VALUES ("
	bumpEnd   = ", LAST_INSERT_ID(UNIX_TIMESTAMP() * 1000000 + MICROSECOND(NOW(6))))" +
		" ON DUPLICATE KEY UPDATE token = LAST_INSERT_ID(token + 1)"
)

func newStatements(table string) statements {
	return statements{
		create: fmt.Sprintf(createTable, table),
		bump:   fmt.Sprintf(bumpStart, table),
	}
}

// quoteTable checks a name "table" or "database.table" and backquotes it.
func quoteTable(t string) (string, error) {
	parts := strings.Split(t, ".")
	if len(parts) > 2 {
		return "", fmt.Errorf("mysqllock: table %q: want table or database.table", t)
	}
	for i, p := range parts {
		if p == "" || len(p) > 64 {
			return "", fmt.Errorf("mysqllock: table %q: each part must have 1 to 64 characters", t)
		}
		for j := 0; j < len(p); j++ {
			c := p[j]
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '$') {
				return "", fmt.Errorf("mysqllock: table %q: character %q is not allowed (letters, digits, _ and $)", t, c)
			}
		}
		parts[i] = "`" + p + "`"
	}
	return strings.Join(parts, "."), nil
}

// Migrate creates the table of fencing-token counters if it does not exist
// (the statement is in docs/MYSQL.md, Fencing token). The driver creates
// it itself the first time it finds it missing, which needs the CREATE
// privilege; call Migrate (or run the statement) beforehand to run the
// driver with only SELECT, INSERT and UPDATE on the table. Migrate is safe
// to call concurrently and more than once.
func (d *Driver) Migrate(ctx context.Context) error {
	if _, err := d.db.ExecContext(ctx, d.sql.create); err != nil {
		return fmt.Errorf("mysqllock: create table %s: %w", d.table, err)
	}
	return nil
}
