package pglock

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5/pgconn"
)

// statements are the SQL a driver (or the transaction-scoped functions)
// runs against one token table. The table name is checked by checkTable,
// so it can be written into the SQL as it is.
type statements struct {
	table string
	// lock, tryLock, xactLock and tryXactLock take the advisory lock on
	// key $1 and, only when it was taken, advance the token row of name $2
	// in the same statement, returning the token: no row means not taken.
	lock, tryLock, xactLock, tryXactLock string
	unlock                               string
	// held reports whether this session holds key $1.
	held string
}

// The token of an acquisition comes from the table's sequence, and is also
// at least one more than the token the name's row held: nextval is not
// undone by a rollback, so a transaction-scoped lock whose transaction
// rolls back never lets its token be handed out again, and the row keeps
// tokens increasing even if the sequence were ever reset. The row is
// written only after the lock function returned true, in the statement's
// own transaction, so the token advances while the lock is held.
const takeSQL = `WITH l AS (SELECT %[2]s($1) AS ok)
INSERT INTO %[1]s AS t (name, token, acquired)
SELECT $2, nextval('%[1]s` + seqSuffix + `'), clock_timestamp() FROM l WHERE %[3]s
ON CONFLICT (name) DO UPDATE SET token = greatest(t.token + 1, excluded.token), acquired = excluded.acquired
RETURNING t.token`

func newStatements(table string) statements {
	take := func(fn, cond string) string { return fmt.Sprintf(takeSQL, table, fn, cond) }
	return statements{
		table: table,
		// pg_advisory_lock returns void: every row of l means "taken".
		lock:        take("pg_advisory_lock", "true"),
		tryLock:     take("pg_try_advisory_lock", "l.ok"),
		xactLock:    take("pg_advisory_xact_lock", "true"),
		tryXactLock: take("pg_try_advisory_xact_lock", "l.ok"),
		unlock:      `SELECT pg_advisory_unlock($1)`,
		// A bigint key shows in pg_locks as classid (high 32 bits), objid
		// (low 32 bits) and objsubid 1.
		held: `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()
AND granted AND objsubid = 1 AND classid = (($1::bigint >> 32) & 4294967295)::oid AND objid = ($1::bigint & 4294967295)::oid)`,
	}
}

// migrateSQL creates the token table and its sequence. It runs as one
// simple-protocol query, hence in one implicit transaction, whose first
// statement takes a transaction-scoped advisory lock: concurrent
// migrations of one table run one after the other, so that CREATE ... IF
// NOT EXISTS never races with itself. The sequence has CACHE 1: a session
// caching values would hand out tokens out of order with other sessions.
func migrateSQL(table string) string {
	return `SELECT pg_advisory_xact_lock(` + strconv.FormatInt(migrateKey(table), 10) + `);
CREATE SEQUENCE IF NOT EXISTS ` + table + seqSuffix + ` AS bigint MINVALUE 1 NO CYCLE CACHE 1;
CREATE TABLE IF NOT EXISTS ` + table + ` (
	name     text        PRIMARY KEY,
	token    bigint      NOT NULL,
	acquired timestamptz NOT NULL
)`
}

// Execer is what Migrate needs: a *pgx.Conn, a pgx.Tx and a
// *pgxpool.Pool all have this method.
type Execer interface {
	Exec(ctx context.Context, sql string, arguments ...any) (pgconn.CommandTag, error)
}

// Migrate creates the token table (with its sequence, named table_seq) if
// it does not exist, through db. A Driver does it itself when it is created
// (unless Options.NoMigrate is set); call Migrate when the role that takes
// locks may not create tables, or before using LockTx and TryLockTx. It is
// safe to run concurrently and repeatedly. An empty table means
// DefaultTable.
//
// The table is
//
//	CREATE SEQUENCE table_seq AS bigint MINVALUE 1 NO CYCLE CACHE 1;
//	CREATE TABLE table (name text PRIMARY KEY, token bigint NOT NULL, acquired timestamptz NOT NULL);
//
// with a row per lock name: the last token handed out and when. Rows may be
// deleted at any time (say, those of names not acquired for a month):
// tokens come from the sequence, which must never be reset or dropped
// while locks are used.
func Migrate(ctx context.Context, db Execer, table string) error {
	if table == "" {
		table = DefaultTable
	}
	if err := checkTable(table); err != nil {
		return err
	}
	if _, err := db.Exec(ctx, migrateSQL(table)); err != nil {
		return fmt.Errorf("pglock: create the token table %s: %w", table, err)
	}
	return nil
}

// PostgreSQL error codes the package looks at.
const (
	codeUndefinedTable    = "42P01"
	codeLockNotAvailable  = "55P03"
	codeQueryCanceled     = "57014"
	codeUndefinedObject   = "42704"
	codeInvalidParamValue = "22023"
)

// pgCode returns the SQLSTATE of err, or "".
func pgCode(err error) string {
	if pe, ok := errors.AsType[*pgconn.PgError](err); ok {
		return pe.Code
	}
	return ""
}

// hint adds advice to errors whose cause is a missing token table.
func hint(err error, table string) error {
	if pgCode(err) == codeUndefinedTable {
		return fmt.Errorf("%w (the token table %s is missing: run pglock.Migrate)", err, table)
	}
	return err
}
