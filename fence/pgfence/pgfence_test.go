package pgfence_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"math"
	mrand "math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/dlockgo/dlock/fence"
	"github.com/dlockgo/dlock/fence/pgfence"
	"github.com/dlockgo/dlock/internal/testenv"
)

// openDB opens the shared test database through database/sql with pgx's
// driver, and makes sure the default fence table exists.
func openDB(t testing.TB) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", testenv.PGURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	if err := pgfence.CreateTable(context.Background(), db); err != nil {
		t.Fatal(err)
	}
	return db
}

// uniq returns a name no other run uses.
func uniq(prefix string) string { return prefix + "_" + rand.Text()[:10] }

// businessTable creates a table standing for the data the fence protects:
// one row per resource with a counter and the list of tokens that wrote.
func businessTable(t testing.TB, db *sql.DB) string {
	t.Helper()
	name := uniq("pgfence_test_data")
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, `CREATE TABLE `+name+` (resource text PRIMARY KEY, n int NOT NULL DEFAULT 0, tokens bigint[] NOT NULL DEFAULT '{}')`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = db.ExecContext(context.Background(), `DROP TABLE `+name) })
	return name
}

// begin starts a transaction at level, rolled back when the test ends
// unless it ended before.
func begin(t *testing.T, db *sql.DB, level sql.IsolationLevel) *sql.Tx {
	t.Helper()
	tx, err := db.BeginTx(context.Background(), &sql.TxOptions{Isolation: level})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback() })
	return tx
}

// admittedTx records token 1 for a new resource named after base, then
// admits token 5 for it in a transaction (see begin) it leaves open.
func admittedTx(t *testing.T, db *sql.DB, base string) (string, *sql.Tx) {
	t.Helper()
	ctx := context.Background()
	res := uniq(base)
	if err := pgfence.Admit(ctx, db, res, 1); err != nil {
		t.Fatal(err)
	}
	tx := begin(t, db, sql.LevelDefault)
	if err := pgfence.Admit(ctx, tx, res, 5); err != nil {
		t.Fatal(err)
	}
	return res, tx
}

func TestStaleRejectedWithBothTokens(t *testing.T) {
	db := openDB(t)
	ctx := context.Background()
	res := uniq("stock")
	for _, tok := range []uint64{7, 7} { // the first token, and the same holder again
		if err := pgfence.Admit(ctx, db, res, tok); err != nil {
			t.Fatalf("Admit(%d): %v", tok, err)
		}
	}
	err := pgfence.Admit(ctx, db, res, 5)
	se, ok := errors.AsType[*fence.StaleError](err)
	if !ok || !errors.Is(err, fence.ErrStale) {
		t.Fatalf("Admit(5) after 7: %v, want a *fence.StaleError", err)
	}
	if want := (fence.StaleError{Resource: res, Token: 5, Highest: 7}); *se != want {
		t.Fatalf("StaleError = %+v, want %+v", *se, want)
	}
	if h, err := pgfence.Highest(ctx, db, res); err != nil || h != 7 {
		t.Fatalf("Highest = %d, %v; want 7 (a stale token is not recorded)", h, err)
	}
	if err := pgfence.Admit(ctx, db, res, 0); !errors.Is(err, fence.ErrInvalidToken) {
		t.Fatalf("Admit(0): %v, want ErrInvalidToken", err)
	}
	if err := pgfence.Admit(ctx, db, res, math.MaxInt64+1); !errors.Is(err, pgfence.ErrTokenRange) {
		t.Fatalf("Admit(MaxInt64+1): %v, want ErrTokenRange", err)
	}
	if err := pgfence.Admit(ctx, db, res, math.MaxInt64); err != nil {
		t.Fatalf("Admit(MaxInt64): %v", err)
	}
	if h, _ := pgfence.Highest(ctx, db, uniq("never")); h != 0 {
		t.Fatalf("Highest of an unknown resource = %d, want 0", h)
	}

	var g fence.Guard = pgfence.Guard{DB: db}
	other := uniq("other")
	if err := g.Admit(ctx, other, 3); err != nil {
		t.Fatalf("Guard.Admit(3): %v", err)
	}
	if err := g.Admit(ctx, other, 2); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("Guard.Admit(2) after 3: %v, want ErrStale", err)
	}
}

// TestWriteAndCheckCommitTogether shows the business write and the token
// check in one transaction: a stale transaction's write is rolled back,
// and a rolled-back transaction leaves no token behind.
func TestWriteAndCheckCommitTogether(t *testing.T) {
	db := openDB(t)
	data := businessTable(t, db)
	ctx := context.Background()
	res := uniq("account")
	if _, err := db.ExecContext(ctx, `INSERT INTO `+data+` (resource) VALUES ($1)`, res); err != nil {
		t.Fatal(err)
	}
	// write runs one transaction that adds 1 and checks token; checkFirst
	// says whether the check comes before the write or after it.
	write := func(token uint64, checkFirst, commit bool) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		upd := func() {
			if _, err := tx.ExecContext(ctx, `UPDATE `+data+` SET n = n + 1 WHERE resource = $1`, res); err != nil {
				t.Fatal(err)
			}
		}
		if !checkFirst {
			upd()
		}
		if err := pgfence.Admit(ctx, tx, res, token); err != nil {
			return err
		}
		if checkFirst {
			upd()
		}
		if !commit {
			return nil
		}
		return tx.Commit()
	}
	n := func() int {
		var n int
		if err := db.QueryRowContext(ctx, `SELECT n FROM `+data+` WHERE resource = $1`, res).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if err := write(10, true, true); err != nil {
		t.Fatalf("token 10: %v", err)
	}
	for _, checkFirst := range []bool{true, false} {
		if err := write(9, checkFirst, true); !errors.Is(err, fence.ErrStale) {
			t.Fatalf("token 9 after 10 (check first: %v): %v, want ErrStale", checkFirst, err)
		}
	}
	if got := n(); got != 1 {
		t.Fatalf("n = %d after one admitted and two stale writes, want 1", got)
	}
	// A transaction with token 11 that rolls back leaves 10 the highest.
	if err := write(11, true, false); err != nil {
		t.Fatal(err)
	}
	if h, _ := pgfence.Highest(ctx, db, res); h != 10 {
		t.Fatalf("Highest = %d after a rolled-back token 11, want 10", h)
	}
	if err := write(10, false, true); err != nil {
		t.Fatalf("token 10 again: %v", err)
	}
	if got := n(); got != 2 {
		t.Fatalf("n = %d, want 2", got)
	}
}

// TestRowLockSerializes holds a transaction that admitted token 5 open
// and starts one with token 4: the second waits for the first, and its
// fate depends on whether the first commits.
func TestRowLockSerializes(t *testing.T) {
	db := openDB(t)
	ctx := context.Background()
	for _, commit := range []bool{true, false} {
		res, txA := admittedTx(t, db, "rowlock")
		done := make(chan error, 1)
		go func() {
			txB, err := db.BeginTx(ctx, nil)
			if err != nil {
				done <- err
				return
			}
			defer txB.Rollback()
			done <- pgfence.Admit(ctx, txB, res, 4)
		}()
		select {
		case err := <-done:
			t.Fatalf("token 4 returned (%v) while the transaction with token 5 was still open", err)
		case <-time.After(300 * time.Millisecond):
		}
		end := txA.Rollback
		if commit {
			end = txA.Commit
		}
		if err := end(); err != nil {
			t.Fatal(err)
		}
		err := <-done
		if commit {
			se, ok := errors.AsType[*fence.StaleError](err)
			if !ok || se.Highest != 5 {
				t.Fatalf("token 4 after token 5 committed: %v, want stale with highest 5", err)
			}
		} else if err != nil {
			t.Fatalf("token 4 after token 5 rolled back: %v, want admitted", err)
		}
	}
}

// TestConcurrentTransactions runs writers with random, roughly growing
// tokens, each in a transaction that admits its token, pauses, and
// appends the token to the resource's list. The committed list must never go down, the
// recorded token must end at the largest one tried, and every rejection
// must name a higher token. Without the fence the same workload must
// show a decrease: proof the check can see one.
func TestConcurrentTransactions(t *testing.T) {
	db := openDB(t)
	db.SetMaxOpenConns(8)
	data := businessTable(t, db)
	ctx := context.Background()

	run := func(res string, fenced bool) (list []int64, maxTok uint64, admitted, rejected int) {
		if _, err := db.ExecContext(ctx, `INSERT INTO `+data+` (resource) VALUES ($1)`, res); err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var wg sync.WaitGroup
		var next atomic.Uint64
		for w := range 8 {
			wg.Go(func() {
				r := mrand.New(mrand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))
				for range 25 {
					// Tokens grow as a lock service hands them out, but
					// their holders arrive in a random order.
					tok := next.Add(1) + r.Uint64N(16)
					time.Sleep(time.Duration(r.IntN(300)) * time.Microsecond)
					err := func() error {
						tx, err := db.BeginTx(ctx, nil)
						if err != nil {
							return err
						}
						defer tx.Rollback()
						if fenced {
							if err := pgfence.Admit(ctx, tx, res, tok); err != nil {
								return err
							}
						}
						time.Sleep(time.Duration(r.IntN(500)) * time.Microsecond)
						if _, err := tx.ExecContext(ctx, `UPDATE `+data+` SET tokens = tokens || $2::bigint WHERE resource = $1`, res, int64(tok)); err != nil {
							return err
						}
						return tx.Commit()
					}()
					mu.Lock()
					maxTok = max(maxTok, tok)
					switch se, ok := errors.AsType[*fence.StaleError](err); {
					case err == nil:
						admitted++
					case ok && se.Token == tok && se.Highest > tok:
						rejected++
					default:
						t.Errorf("token %d: %v", tok, err)
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		var s string
		if err := db.QueryRowContext(ctx, `SELECT array_to_string(tokens, ',') FROM `+data+` WHERE resource = $1`, res).Scan(&s); err != nil {
			t.Fatal(err)
		}
		for _, f := range splitComma(s) {
			var v int64
			fmt.Sscan(f, &v)
			list = append(list, v)
		}
		return list, maxTok, admitted, rejected
	}
	decreases := func(list []int64) int {
		n := 0
		for i := 1; i < len(list); i++ {
			if list[i] < list[i-1] {
				n++
			}
		}
		return n
	}

	res := uniq("concurrent")
	list, maxTok, admitted, rejected := run(res, true)
	if len(list) != admitted {
		t.Fatalf("%d writes committed, %d admitted", len(list), admitted)
	}
	if rejected == 0 {
		t.Fatal("no random token was rejected: the fence checks nothing")
	}
	if d := decreases(list); d != 0 {
		t.Fatalf("the committed tokens went down %d times: %v", d, list)
	}
	if h, _ := pgfence.Highest(ctx, db, res); h != maxTok {
		t.Fatalf("Highest = %d, want the largest token tried, %d", h, maxTok)
	}
	t.Logf("fenced: %d admitted, %d rejected", admitted, rejected)

	list, _, _, _ = run(uniq("unfenced"), false)
	if d := decreases(list); d == 0 {
		t.Fatalf("without the fence, %d random tokens were committed in order: the check above could not fail", len(list))
	}
}

func splitComma(s string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == ',' {
			if i > start {
				out = append(out, s[start:i])
			}
			start = i + 1
		}
	}
	return out
}

func TestNamedTable(t *testing.T) {
	for _, bad := range []string{"", "a.b.c", "a..", ".x", "x\x00y"} {
		if _, err := pgfence.NewTable(bad); err == nil {
			t.Errorf("NewTable(%q) accepted an invalid name", bad)
		}
	}
	db := openDB(t)
	ctx := context.Background()
	name := "public." + uniq(`Odd "fence`)
	tb, err := pgfence.NewTable(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := tb.Create(ctx, db); err != nil {
		t.Fatal(err)
	}
	quoted := `public."` + strings.ReplaceAll(strings.TrimPrefix(name, "public."), `"`, `""`) + `"`
	t.Cleanup(func() {
		if _, err := db.ExecContext(context.Background(), `DROP TABLE `+quoted); err != nil {
			t.Errorf("drop %s: %v", quoted, err)
		}
	})
	g := pgfence.Guard{DB: db, Table: tb}
	if err := g.Admit(ctx, "r", 8); err != nil {
		t.Fatal(err)
	}
	if err := g.Admit(ctx, "r", 7); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("Admit(7) after 8 in %s: %v", name, err)
	}
	if h, _ := pgfence.Highest(ctx, db, "r"); h == 8 {
		t.Fatal("the named table wrote to the default table")
	}
	if err := tb.Forget(ctx, db, "r"); err != nil {
		t.Fatal(err)
	}
	if err := g.Admit(ctx, "r", 7); err != nil {
		t.Fatalf("Admit(7) after Forget: %v", err)
	}
}

func BenchmarkGuardAdmit(b *testing.B) {
	db := openDB(b)
	g := pgfence.Guard{DB: db}
	ctx := context.Background()
	res := uniq("bench")
	b.ReportAllocs()
	for tok := uint64(1); b.Loop(); tok++ {
		if err := g.Admit(ctx, res, tok); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAdmitInTx measures a whole fenced transaction: begin, Admit,
// commit.
func BenchmarkAdmitInTx(b *testing.B) {
	db := openDB(b)
	ctx := context.Background()
	res := uniq("benchtx")
	b.ReportAllocs()
	for tok := uint64(1); b.Loop(); tok++ {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		if err := pgfence.Admit(ctx, tx, res, tok); err != nil {
			b.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			b.Fatal(err)
		}
	}
}

// TestRepeatableRead: under REPEATABLE READ, a transaction whose snapshot
// predates a concurrent higher token's commit fails with a serialization
// error instead of a StaleError; either way it does not get past Admit.
func TestRepeatableRead(t *testing.T) {
	db := openDB(t)
	ctx := context.Background()
	res, txA := admittedTx(t, db, "rr")
	// B's snapshot is taken by its first statement, before A commits.
	txB := begin(t, db, sql.LevelRepeatableRead)
	var pidB int
	if err := txB.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&pidB); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- pgfence.Admit(ctx, txB, res, 4) }()
	// Commit A once B waits for A's row lock.
	for deadline := time.Now().Add(10 * time.Second); ; {
		var waiting bool
		if err := db.QueryRowContext(ctx, `SELECT coalesce(wait_event_type = 'Lock', false) FROM pg_stat_activity WHERE pid = $1`, pidB).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("B never waited for A's row lock")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := txA.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err == nil || !strings.Contains(err.Error(), "could not serialize") {
		t.Fatalf("REPEATABLE READ token 4 behind a committed 5: %v, want a serialization failure", err)
	}
	// A REPEATABLE READ transaction that starts after the commit gets the
	// StaleError.
	txC := begin(t, db, sql.LevelRepeatableRead)
	if se, ok := errors.AsType[*fence.StaleError](pgfence.Admit(ctx, txC, res, 4)); !ok || se.Highest != 5 {
		t.Fatalf("REPEATABLE READ token 4 after 5: %v, want stale with highest 5", se)
	}
}
