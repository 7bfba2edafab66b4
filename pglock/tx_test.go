package pglock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/pglock"
)

// begin opens a connection of the test's own and a transaction on it.
func begin(t *testing.T, ctx context.Context) pgx.Tx {
	t.Helper()
	tx, err := testenv.PGConn(t).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	return tx
}

// TestTxLock: transaction-scoped locks exclude each other and a Driver's
// locks on the same name; they are released at commit and at rollback;
// their tokens increase, and a rolled-back token is never handed out again.
func TestTxLock(t *testing.T) {
	ctx := testContext(t, 30*time.Second)
	newDriver(t, pglock.Options{}) // creates the table
	tt := pglock.TxTable(table)
	name := "tx/" + randomHex(4)

	tx1, tx2 := begin(t, ctx), begin(t, ctx)
	tok1, err := pglock.LockTx(ctx, tx1, name, tt)
	if err != nil {
		t.Fatal(err)
	}
	_, err = pglock.TryLockTx(ctx, tx2, name, tt)
	if held, ok := errors.AsType[*driver.HeldError](err); !ok || held.Name != name {
		t.Fatalf("TryLockTx while another transaction holds the lock = %v, want a *HeldError", err)
	}
	// tx2 is still usable after a refused TryLockTx, and waits.
	got := make(chan uint64, 1)
	errc := make(chan error, 1)
	go func() {
		tok, err := pglock.LockTx(ctx, tx2, name, tt)
		if err != nil {
			errc <- err
			return
		}
		got <- tok
	}()
	select {
	case <-got:
		t.Fatal("LockTx returned while another transaction held the lock")
	case err := <-errc:
		t.Fatal(err)
	case <-time.After(300 * time.Millisecond):
	}

	// A Driver's lease on the same name is refused too.
	l := newLocker(t, pglock.Options{})
	if _, err := l.TryAcquire(ctx, name); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("Driver TryAcquire while a transaction holds the lock = %v, want ErrNotAcquired", err)
	}

	if err := tx1.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	var tok2 uint64
	select {
	case tok2 = <-got:
	case err := <-errc:
		t.Fatal(err)
	case <-time.After(5 * time.Second):
		t.Fatal("LockTx did not get the lock after the holder committed")
	}
	if tok2 <= tok1 {
		t.Errorf("second transaction's token %d is not greater than the first's %d", tok2, tok1)
	}

	// Rollback releases the lock, and its token is not handed out again.
	if err := tx2.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	lease, err := l.TryAcquire(ctx, name)
	if err != nil {
		t.Fatalf("Driver TryAcquire after the transaction rolled back: %v", err)
	}
	if lease.Token() <= tok2 {
		t.Errorf("token %d after a rolled-back transaction's token %d: a token was handed out twice", lease.Token(), tok2)
	}
	// And a Driver's lease excludes transactions.
	tx3 := begin(t, ctx)
	if _, err := pglock.TryLockTx(ctx, tx3, name, tt); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("TryLockTx while a Driver holds the lock = %v, want ErrNotAcquired", err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	tok3, err := pglock.TryLockTx(ctx, tx3, name, tt)
	if err != nil {
		t.Fatal(err)
	}
	if tok3 <= lease.Token() {
		t.Errorf("transaction token %d after the lease's %d", tok3, lease.Token())
	}
}

// TestTxLockErrors: bad names and tables, a missing table, a cancelled
// wait.
func TestTxLockErrors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	newDriver(t, pglock.Options{})
	tx := begin(t, ctx)
	if _, err := pglock.LockTx(ctx, tx, "a//b", pglock.TxTable(table)); !errors.Is(err, dlock.ErrInvalidName) {
		t.Errorf("LockTx with a bad name = %v, want ErrInvalidName", err)
	}
	if _, err := pglock.LockTx(ctx, tx, "a", pglock.TxTable("Bad-Table")); err == nil {
		t.Error("LockTx with a bad table succeeded")
	}
	if _, err := pglock.TryLockTx(ctx, tx, "a", pglock.TxTable("pglock_missing_"+randomHex(4))); err == nil {
		t.Error("TryLockTx on a missing table succeeded")
	} else {
		t.Logf("missing table: %v", err)
	}

	// A wait whose context ends returns its error.
	name := "tx-cancel/" + randomHex(4)
	holder := begin(t, ctx)
	if _, err := pglock.LockTx(ctx, holder, name, pglock.TxTable(table)); err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer wcancel()
	if _, err := pglock.LockTx(wctx, begin(t, ctx), name, pglock.TxTable(table)); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("LockTx past its deadline = %v, want DeadlineExceeded", err)
	}
}
