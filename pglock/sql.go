package pglock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// statements are the SQL run against one token table, whose name,
// checked by checkTable, is written in as it is.
type statements struct {
	table string
	// lock, tryLock, xactLock and tryXactLock take the advisory lock on
	// key $1 and, only if taken, advance the token row of name $2 in the
	// same statement, returning the token (no row: not taken).
	lock, tryLock, xactLock, tryXactLock string
	unlock                               string
	letGo, letGoShared                   string // release array $1's keys held, after a failure
	held                                 string // whether this session holds key $1

	// The readers-writer lock's shared side: as lock and tryLock.
	lockShared, tryLockShared, unlockShared string
	// tryPermit takes array $1's first free key, advancing row $2 (no row:
	// all held), and returns the token and the key.
	tryPermit string
	// pickSlot returns the key of the array $1 with the fewest waiting
	// requests (ties at random): the slot a permit waiter blocks on.
	pickSlot string
	// unlockPermit releases key $1 and notifies channel $2 if the key is
	// then free (no waiter blocked on it took it over), returning the
	// unlock's result and the notification's void.
	unlockPermit string
	// lockLeader and tryLockLeader are lock and tryLock that also store
	// the leader's value $3 and session pid in row $2 and notify channel
	// $4, returning the token and the notification's void.
	lockLeader, tryLockLeader string
	unlockLeader              string // releases key $1, notifies channel $2
	leader                    string // row $2's token and value if its pid still holds $1
	awaitFree                 string // waits until key $1 is free, then lets it go
}

// An acquisition's token comes from the table's sequence and is at least
// one more than the name's row: nextval survives a rollback, so a
// rolled-back transaction-scoped lock's token is never handed out again,
// and the row keeps tokens increasing even if the sequence were reset. The
// row is written only once the lock function returned true, in the
// statement's transaction, so the token advances while the lock is held.
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
		// A key not held draws a warning, not an error.
		letGo:       `SELECT pg_advisory_unlock(k) FROM unnest($1::bigint[]) AS u(k)`,
		letGoShared: `SELECT pg_advisory_unlock_shared(k) FROM unnest($1::bigint[]) AS u(k)`,
		held: `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()
AND granted AND ` + keyMatch("$1::bigint") + `)`,

		lockShared:    take("pg_advisory_lock_shared", "true"),
		tryLockShared: take("pg_try_advisory_lock_shared", "l.ok"),
		unlockShared:  `SELECT pg_advisory_unlock_shared($1)`,
		tryPermit:     fmt.Sprintf(tryPermitSQL, table),
		pickSlot: `SELECT u.k FROM unnest($1::bigint[]) AS u(k)
ORDER BY (SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND ` + keyMatch("u.k") + `), random() LIMIT 1`,
		unlockPermit: `WITH u AS (SELECT pg_advisory_unlock($1) AS ok)
SELECT u.ok, CASE WHEN u.ok AND NOT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted AND ` + keyMatch("$1::bigint") + `)
THEN pg_notify($2, '') END FROM u`,
		lockLeader:    fmt.Sprintf(leaderSQL, table, "pg_advisory_lock", "true"),
		tryLockLeader: fmt.Sprintf(leaderSQL, table, "pg_try_advisory_lock", "l.ok"),
		unlockLeader: `WITH u AS (SELECT pg_advisory_unlock($1) AS ok)
SELECT u.ok, pg_notify($2, '') FROM u`,
		leader: `SELECT t.token, coalesce(t.value, '') FROM ` + table + ` AS t WHERE t.name = $2
AND EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted AND pid = t.holder AND ` + keyMatch("$1::bigint") + `)`,
		awaitFree: `WITH l AS (SELECT pg_advisory_lock_shared($1)) SELECT pg_advisory_unlock_shared($1) FROM l`,
	}
}

// keyMatch is the condition that a pg_locks row is about the bigint
// advisory key k: classid (high 32 bits), objid (low 32) and objsubid 1.
func keyMatch(k string) string {
	return `objsubid = 1 AND classid = ((` + k + ` >> 32) & 4294967295)::oid AND objid = (` + k + ` & 4294967295)::oid`
}

// tryPermitSQL takes the first free key of the array $1: the LIMIT stops
// the scan at the first key taken, and l, read twice, is evaluated once.
const tryPermitSQL = `WITH l AS (SELECT u.k FROM unnest($1::bigint[]) AS u(k) WHERE pg_try_advisory_lock(u.k) LIMIT 1),
t AS (INSERT INTO %[1]s AS t (name, token, acquired)
SELECT $2, nextval('%[1]s` + seqSuffix + `'), clock_timestamp() FROM l
ON CONFLICT (name) DO UPDATE SET token = greatest(t.token + 1, excluded.token), acquired = excluded.acquired
RETURNING t.token)
SELECT t.token, l.k FROM t, l`

// leaderSQL is takeSQL for an election: the row also gets the leader's
// value and session pid, and the channel a notification, delivered with
// the row when the statement commits.
const leaderSQL = `WITH l AS (SELECT %[2]s($1) AS ok),
t AS (INSERT INTO %[1]s AS t (name, token, acquired, value, holder)
SELECT $2, nextval('%[1]s` + seqSuffix + `'), clock_timestamp(), $3, pg_backend_pid() FROM l WHERE %[3]s
ON CONFLICT (name) DO UPDATE SET token = greatest(t.token + 1, excluded.token), acquired = excluded.acquired,
value = excluded.value, holder = excluded.holder
RETURNING t.token)
SELECT t.token, pg_notify($4, '') FROM t`

// migrateSQL creates the token table and its sequence in one
// simple-protocol query, one implicit transaction, whose first statement
// takes a transaction-scoped advisory lock, so that concurrent migrations
// of a table, and their CREATE ... IF NOT EXISTS, never race. The sequence
// has CACHE 1: a session caching values would hand out tokens out of order
// with other sessions.
func migrateSQL(table string) string {
	return `SELECT pg_advisory_xact_lock(` + strconv.FormatInt(migrateKey(table), 10) + `);
CREATE SEQUENCE IF NOT EXISTS ` + table + seqSuffix + ` AS bigint MINVALUE 1 NO CYCLE CACHE 1;
CREATE TABLE IF NOT EXISTS ` + table + ` (
	name     text        PRIMARY KEY,
	token    bigint      NOT NULL,
	acquired timestamptz NOT NULL,
	value    text,
	holder   integer
);
DO $$ BEGIN
IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = '` + table + `'::regclass AND attname = 'holder' AND NOT attisdropped) THEN
	ALTER TABLE ` + table + ` ADD COLUMN IF NOT EXISTS value text, ADD COLUMN IF NOT EXISTS holder integer;
END IF;
END $$`
}

// Execer is what Migrate needs: *pgx.Conn, pgx.Tx, *pgxpool.Pool have it.
type Execer interface {
	Exec(ctx context.Context, sql string, arguments ...any) (pgconn.CommandTag, error)
}

// Migrate creates the token table (with its sequence, table_seq) through
// db if it does not exist, and adds the election columns to a table
// created before them. NewDriver does it unless Options.NoMigrate is set;
// call Migrate when the role that takes locks may not create tables, or
// before using LockTx and TryLockTx. It is safe to run concurrently and
// repeatedly. An empty table means DefaultTable. The table is
//
//	CREATE SEQUENCE table_seq AS bigint MINVALUE 1 NO CYCLE CACHE 1;
//	CREATE TABLE table (name text PRIMARY KEY, token bigint NOT NULL, acquired timestamptz NOT NULL,
//		value text, holder integer);
//
// Rows may be deleted at any time; the sequence must never be reset or
// dropped while locks are used. See docs/POSTGRES.md, Fencing token.
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
	codeUndefinedColumn   = "42703"
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
	switch pgCode(err) {
	case codeUndefinedTable:
		return fmt.Errorf("%w (the token table %s is missing: run pglock.Migrate)", err, table)
	case codeUndefinedColumn:
		return fmt.Errorf("%w (the token table %s predates elections: run pglock.Migrate)", err, table)
	}
	return err
}

// Limits of a table name: 63 bytes, less "_seq" for the sequence's name.
const (
	maxIdent      = 63
	seqSuffix     = "_seq"
	maxTableIdent = maxIdent - len(seqSuffix)
)

// checkTable reports whether t can be a token table's name (see
// Options.Table): lower-case ASCII letters, digits and underscores, not
// starting with a digit, optionally behind a schema of the same form.
func checkTable(t string) error {
	schema, table, qualified := strings.Cut(t, ".")
	if !qualified {
		schema, table = "", t
	} else if err := checkIdent(schema, maxIdent); err != nil {
		return fmt.Errorf("pglock: table %q: schema: %w", t, err)
	}
	if err := checkIdent(table, maxTableIdent); err != nil {
		return fmt.Errorf("pglock: table %q: %w", t, err)
	}
	return nil
}

func checkIdent(s string, max int) error {
	if s == "" {
		return fmt.Errorf("empty identifier")
	}
	if len(s) > max {
		return fmt.Errorf("%d bytes, more than %d", len(s), max)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', c == '_':
		case '0' <= c && c <= '9' && i > 0:
		default:
			return fmt.Errorf("character %q at %d: want lower-case letters, digits and underscores, not starting with a digit", c, i)
		}
	}
	return nil
}
