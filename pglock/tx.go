package pglock

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
)

// A TxOption configures LockTx and TryLockTx.
type TxOption func(*txConfig)

type txConfig struct{ table string }

// TxTable sets the token table of LockTx and TryLockTx (default
// DefaultTable). Use the table of the Drivers that lock the same names:
// the table is part of the lock's key (see Key).
func TxTable(table string) TxOption {
	return func(c *txConfig) { c.table = table }
}

// LockTx takes the lock called name for the rest of the transaction tx,
// waiting on the server (pg_advisory_xact_lock) as long as ctx allows, and
// returns its fencing token, drawn in tx. The lock is released when tx
// ends, not earlier, and is not renewed or watched. It is the same lock as
// a Driver's on the same table; the token table must exist (see Migrate).
// See Transaction-scoped locks in docs/POSTGRES.md.
//
// When ctx ends during the wait, pgx interrupts the query as tx's
// connection is configured to (by default closing the connection, which
// ends the transaction); the error wraps ctx's. A session lock_timeout
// ends a wait with a *driver.HeldError, aborting the transaction; so does
// TryLockTx when the lock is held, leaving it intact.
func LockTx(ctx context.Context, tx pgx.Tx, name string, opts ...TxOption) (token uint64, err error) {
	return lockTx(ctx, tx, name, opts, true)
}

// TryLockTx is LockTx without waiting: when another session or
// transaction holds the lock, it returns a *driver.HeldError (matching
// dlock.ErrNotAcquired) and tx stays usable.
func TryLockTx(ctx context.Context, tx pgx.Tx, name string, opts ...TxOption) (token uint64, err error) {
	return lockTx(ctx, tx, name, opts, false)
}

// txStatements caches the statements of each table LockTx was used with.
var txStatements sync.Map // table → *statements

func lockTx(ctx context.Context, tx pgx.Tx, name string, opts []TxOption, wait bool) (uint64, error) {
	cfg := txConfig{table: DefaultTable}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	if err := dlock.ValidateName(name); err != nil {
		return 0, err
	}
	if tx == nil {
		return 0, errors.New("pglock: nil transaction")
	}
	st, ok := txStatements.Load(cfg.table)
	if !ok {
		if err := checkTable(cfg.table); err != nil {
			return 0, err
		}
		s := newStatements(cfg.table)
		st, _ = txStatements.LoadOrStore(cfg.table, &s)
	}
	sql := st.(*statements).tryXactLock
	if wait {
		sql = st.(*statements).xactLock
	}
	var token int64
	err := tx.QueryRow(ctx, sql, Key(cfg.table, name), name).Scan(&token)
	switch {
	case err == nil:
		return uint64(token), nil
	case errors.Is(err, pgx.ErrNoRows), pgCode(err) == codeLockNotAvailable:
		return 0, &driver.HeldError{Name: name}
	}
	return 0, fmt.Errorf("pglock: lock %q in the transaction: %w", name, hint(err, cfg.table))
}
