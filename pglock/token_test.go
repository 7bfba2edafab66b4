package pglock_test

import (
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/locktest"
	"github.com/dlockgo/dlock/pglock"
)

// TestTokensStrictlyIncrease: tokens of one name strictly increase across
// drivers, TryAcquire and Acquire, a deleted token row, and concurrent
// acquisitions of other names; the row holds the last token.
func TestTokensStrictlyIncrease(t *testing.T) {
	ctx := testContext(t, 60*time.Second)
	adm := newAdmin(t)
	lockers := []*dlock.Locker{newLocker(t, pglock.Options{}), newLocker(t, pglock.Options{}), newLocker(t, pglock.Options{})}
	name := "tokens/" + randomHex(4)

	// Other names taken concurrently advance the shared sequence; that must
	// not disturb the order of this name's tokens.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 2 {
		l := newLocker(t, pglock.Options{})
		wg.Go(func() {
			other := name + "/noise" + strconv.Itoa(g)
			for {
				select {
				case <-stop:
					return
				default:
				}
				lease, err := l.Acquire(ctx, other)
				if err != nil {
					t.Error(err)
					return
				}
				_ = lease.Release(ctx)
			}
		})
	}

	var last uint64
	for i := range 60 {
		lease := locktest.TakeTurn(t, ctx, lockers, i, name)
		if lease.Token() <= last {
			t.Errorf("acquisition %d: token %d is not greater than %d", i, lease.Token(), last)
		}
		last = lease.Token()
		var row int64
		adm.mu.Lock()
		err := adm.c.QueryRow(ctx, "SELECT token FROM "+table+" WHERE name = $1", name).Scan(&row)
		adm.mu.Unlock()
		if err != nil {
			t.Fatal(err)
		}
		if uint64(row) != lease.Token() {
			t.Errorf("acquisition %d: the token row holds %d, the lease %d", i, row, lease.Token())
		}
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if i == 30 {
			// Deleting rows (say, of names no longer used) is allowed.
			adm.exec(t, "DELETE FROM "+table+" WHERE name = $1", name)
		}
	}
	close(stop)
	wg.Wait()
}

// TestTokenRowKeepsOrder: if the sequence were reset (by a careless
// restore), the row still keeps a name's tokens increasing.
func TestTokenRowKeepsOrder(t *testing.T) {
	ctx := testContext(t, 30*time.Second)
	tbl := "pglock_reset_" + randomHex(4)
	t.Cleanup(func() { _ = dropTable(tbl) })
	adm := newAdmin(t)
	l := newLocker(t, pglock.Options{Table: tbl})
	name := "reset"
	var tokens []uint64
	for i := range 4 {
		if i == 2 {
			adm.exec(t, "ALTER SEQUENCE "+tbl+"_seq RESTART WITH 1")
		}
		lease, err := l.TryAcquire(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		tokens = append(tokens, lease.Token())
		_ = lease.Release(ctx)
	}
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Errorf("tokens %v do not strictly increase", tokens)
			break
		}
	}
}
