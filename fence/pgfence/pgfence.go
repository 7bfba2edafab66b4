package pgfence

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/dlockgo/dlock/fence"
)

// DefaultTable is the name of the fence table the package-level functions
// and a Guard with no Table use.
const DefaultTable = "dlock_fence"

// Querier is what the functions need of a connection: *sql.DB, *sql.Tx
// and *sql.Conn have it. Pass the transaction that makes the business
// write, so that both commit together.
type Querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// ErrTokenRange is returned for a token PostgreSQL's bigint cannot hold.
var ErrTokenRange = errors.New("pgfence: token above the largest bigint")

// Table is a fence table: one row (resource text primary key, token
// bigint) per resource. A Table holds only its SQL text; it is safe for
// concurrent use.
type Table struct {
	name    string
	create  string
	admit   string
	highest string
	forget  string
}

var defaultTable = mustTable(DefaultTable)

func mustTable(name string) *Table {
	t, err := NewTable(name)
	if err != nil {
		panic(err)
	}
	return t
}

// NewTable returns the fence table called name, which may be qualified by
// a schema ("app.fence"). Each part is quoted as an identifier, so it is
// taken as written: "Fence" and "fence" are different tables.
func NewTable(name string) (*Table, error) {
	parts := strings.Split(name, ".")
	if len(parts) > 2 {
		return nil, fmt.Errorf("pgfence: table name %q has more than a schema and a name", name)
	}
	for i, p := range parts {
		if p == "" || strings.ContainsRune(p, 0) {
			return nil, fmt.Errorf("pgfence: invalid table name %q", name)
		}
		parts[i] = `"` + strings.ReplaceAll(p, `"`, `""`) + `"`
	}
	q := strings.Join(parts, ".")
	return &Table{
		name: name,
		create: `CREATE TABLE IF NOT EXISTS ` + q + ` (
	resource text PRIMARY KEY,
	token bigint NOT NULL CHECK (token > 0)
)`,
		// One statement: insert the first token for a resource, or raise
		// the existing row's token when ours is not lower. ON CONFLICT
		// locks the row even when the WHERE clause leaves it alone, and a
		// concurrent transaction that holds the row lock makes this
		// statement wait and then re-check against the committed token.
		admit: `INSERT INTO ` + q + ` AS f (resource, token) VALUES ($1, $2)
ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token
WHERE f.token <= EXCLUDED.token
RETURNING f.token`,
		highest: `SELECT token FROM ` + q + ` WHERE resource = $1`,
		forget:  `DELETE FROM ` + q + ` WHERE resource = $1`,
	}, nil
}

// Name returns the table's name as given to NewTable.
func (t *Table) Name() string { return t.name }

// Create creates the table if it does not exist.
func (t *Table) Create(ctx context.Context, q Querier) error {
	if _, err := q.ExecContext(ctx, t.create); err != nil {
		return fmt.Errorf("pgfence: create table %s: %w", t.name, err)
	}
	return nil
}

// Admit accepts token for resource when it is at least the highest token
// recorded for resource, and records it; otherwise it returns a
// *fence.StaleError (errors.Is(err, fence.ErrStale)) and changes nothing.
// Run in a transaction, it holds the resource's row lock until the
// transaction ends: the caller's write in the same transaction commits
// only with the check, and no transaction with another token for the
// resource gets past Admit meanwhile. After a rejection the caller should
// roll the transaction back. Under REPEATABLE READ or SERIALIZABLE, a
// transaction whose snapshot predates the commit of a concurrent token
// gets PostgreSQL's serialization failure (SQLSTATE 40001) instead of a
// StaleError; it too must roll back.
//
// Token 0 gives fence.ErrInvalidToken, a token above math.MaxInt64
// ErrTokenRange.
func (t *Table) Admit(ctx context.Context, q Querier, resource string, token uint64) error {
	if token == 0 {
		return fmt.Errorf("%w (resource %q)", fence.ErrInvalidToken, resource)
	}
	if token > math.MaxInt64 {
		return fmt.Errorf("%w: %d (resource %q)", ErrTokenRange, token, resource)
	}
	for attempt := 0; ; attempt++ {
		var got int64
		err := q.QueryRowContext(ctx, t.admit, resource, int64(token)).Scan(&got)
		if err == nil {
			return nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("pgfence: admit token %d for %q: %w", token, resource, err)
		}
		// The row is there with a higher token. In a transaction we hold
		// its lock and this read sees it (READ COMMITTED reads the
		// committed row). In autocommit, Forget may have deleted it in
		// between: then try again, once.
		high, err := t.Highest(ctx, q, resource)
		if err != nil {
			return err
		}
		if high > token {
			return &fence.StaleError{Resource: resource, Token: token, Highest: high}
		}
		if attempt > 0 {
			return fmt.Errorf("pgfence: the record of %q keeps changing under token %d", resource, token)
		}
	}
}

// Highest returns the highest token recorded for resource; 0 if none.
func (t *Table) Highest(ctx context.Context, q Querier, resource string) (uint64, error) {
	var high int64
	err := q.QueryRowContext(ctx, t.highest, resource).Scan(&high)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("pgfence: read the token of %q: %w", resource, err)
	}
	return uint64(high), nil
}

// Forget deletes resource's row: the next token for it is admitted
// whatever its value. Call it only when the resource itself is gone.
func (t *Table) Forget(ctx context.Context, q Querier, resource string) error {
	if _, err := q.ExecContext(ctx, t.forget, resource); err != nil {
		return fmt.Errorf("pgfence: forget %q: %w", resource, err)
	}
	return nil
}

// CreateTable creates DefaultTable if it does not exist.
func CreateTable(ctx context.Context, q Querier) error { return defaultTable.Create(ctx, q) }

// Admit is Table.Admit on DefaultTable.
func Admit(ctx context.Context, q Querier, resource string, token uint64) error {
	return defaultTable.Admit(ctx, q, resource, token)
}

// Highest is Table.Highest on DefaultTable.
func Highest(ctx context.Context, q Querier, resource string) (uint64, error) {
	return defaultTable.Highest(ctx, q, resource)
}

// Guard is a fence.Guard over a database: each Admit is one autocommit
// statement (when DB is a *sql.DB), which records the token for good.
// Use it where the write that follows does not live in the same database;
// where it does, call Admit in the write's transaction instead.
type Guard struct {
	// DB runs the statements, usually a *sql.DB.
	DB Querier
	// Table is the fence table; DefaultTable when nil.
	Table *Table
}

// Admit implements fence.Guard (see Table.Admit).
func (g Guard) Admit(ctx context.Context, resource string, token uint64) error {
	return cmp.Or(g.Table, defaultTable).Admit(ctx, g.DB, resource, token)
}

var _ fence.Guard = Guard{}
