package mysqllock_test

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/mysqllock"
)

// TestTokens: tokens strictly increase across clients, and keep doing so
// after the name's row is deleted and after the table is dropped (it is
// created again on first use).
func TestTokens(t *testing.T) {
	ctx := testContext(t, 60*time.Second)
	o := mysqllock.Options{Table: testTable(t)}
	a, _ := newLocker(t, o)
	b, _ := newLocker(t, o)
	adm := newAdmin(t)
	var last uint64
	take := func(l *dlock.Locker, what string) {
		t.Helper()
		lease, err := l.Acquire(ctx, "tokens")
		if err != nil {
			t.Fatal(err)
		}
		if lease.Token() <= last {
			t.Errorf("%s: token %d is not greater than %d", what, lease.Token(), last)
		}
		last = lease.Token()
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 20 {
		take([]*dlock.Locker{a, b}[i%2], "in turn")
	}
	if _, err := adm.db.Exec("DELETE FROM "+o.Table+" WHERE name = ?", "tokens"); err != nil {
		t.Fatal(err)
	}
	take(b, "after the row was deleted")
	if _, err := adm.db.Exec("DROP TABLE " + o.Table); err != nil {
		t.Fatal(err)
	}
	take(a, "after the table was dropped")
	take(b, "after the table was created again")
}

// TestMigrate creates the table, twice without harm.
func TestMigrate(t *testing.T) {
	ctx := testContext(t, 30*time.Second)
	table := testTable(t)
	d, err := mysqllock.NewDriver(newDB(t, nil), &mysqllock.Options{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for range 2 {
		if err := d.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
	}
	var n int
	if err := d.DB().QueryRow("SELECT COUNT(*) FROM " + table).Scan(&n); err != nil {
		t.Fatalf("the table does not exist after Migrate: %v", err)
	}
}

// TestLongNames: names too long for the server are hashed; two 100-byte
// names that differ only at the end are different locks, and so are
// names that differ only in case.
func TestLongNames(t *testing.T) {
	ctx := testContext(t, 30*time.Second)
	o := mysqllock.Options{Table: testTable(t)}
	a, d := newLocker(t, o)
	b, _ := newLocker(t, o)
	long := strings.Repeat("n", 99)
	for _, pair := range [][2]string{{long + "1", long + "2"}, {"Case", "case"}, {"CASE", "cAsE"}} {
		k0, k1 := d.LockName(pair[0]), d.LockName(pair[1])
		if k0 == k1 || len(k0) > mysqllock.MaxLockNameLen || len(k1) > mysqllock.MaxLockNameLen {
			t.Errorf("LockName(%q) = %q, LockName(%q) = %q", pair[0], k0, pair[1], k1)
		}
		lease, err := a.TryAcquire(ctx, pair[0])
		if err != nil {
			t.Fatal(err)
		}
		other, err := b.TryAcquire(ctx, pair[1])
		if err != nil {
			t.Errorf("TryAcquire(%q) while %q is held: %v", pair[1], pair[0], err)
		} else {
			_ = other.Release(ctx)
		}
		if _, err := b.TryAcquire(ctx, pair[0]); !errors.Is(err, dlock.ErrNotAcquired) {
			t.Errorf("TryAcquire(%q) while held = %v, want ErrNotAcquired", pair[0], err)
		}
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	max := strings.Repeat("m", dlock.MaxNameLen)
	lease, err := a.Acquire(ctx, max)
	if err != nil {
		t.Fatalf("Acquire of a %d-byte name: %v", len(max), err)
	}
	if id := newAdmin(t).holder(d.LockName(max)); id == 0 {
		t.Errorf("the server does not show %q held", d.LockName(max))
	}
	_ = lease.Release(ctx)
}

// TestDedicatedConnection: the lock lives on a connection of its own, not
// on one the pool hands out: RELEASE_ALL_LOCKS on every other connection
// of the same *sql.DB leaves it held.
func TestDedicatedConnection(t *testing.T) {
	ctx := testContext(t, 30*time.Second)
	db := newDB(t, nil)
	l := lockerOn(t, db, mysqllock.Options{})
	d := l.Driver().(*mysqllock.Driver)
	lease, err := l.Acquire(ctx, "dedicated")
	if err != nil {
		t.Fatal(err)
	}
	adm := newAdmin(t)
	id := adm.holder(d.LockName("dedicated"))
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 10 {
				var conn int64
				if err := db.QueryRowContext(ctx, "SELECT CONNECTION_ID() FROM (SELECT RELEASE_ALL_LOCKS()) AS x").Scan(&conn); err != nil {
					t.Error(err)
					return
				}
				if conn == id {
					t.Errorf("the pool handed out the lock's connection %d", id)
				}
			}
		})
	}
	wg.Wait()
	if got := adm.holder(d.LockName("dedicated")); got != id {
		t.Errorf("after RELEASE_ALL_LOCKS on the pool, the holder is %d, want %d", got, id)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestConnectionRestored: after a release the connection goes back to the
// pool with its own wait_timeout, and no user variable of the driver's.
func TestConnectionRestored(t *testing.T) {
	ctx := testContext(t, 30*time.Second)
	db := newDB(t, nil)
	db.SetMaxOpenConns(1)
	var before int64
	if err := db.QueryRow("SELECT @@SESSION.wait_timeout").Scan(&before); err != nil {
		t.Fatal(err)
	}
	l := lockerOn(t, db, mysqllock.Options{})
	lease, err := l.Acquire(ctx, "restored", dlock.WithTTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// A TryAcquire that finds the lock held gives its connection back too.
	other, _ := newLocker(t, mysqllock.Options{Table: testTable(t)})
	held, err := other.Acquire(ctx, "restored")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(ctx)
	if _, err := l.TryAcquire(ctx, "restored"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryAcquire while held = %v, want ErrNotAcquired", err)
	}
	var after int64
	var saved *int64
	if err := db.QueryRow("SELECT @@SESSION.wait_timeout, @dlock_wait_timeout").Scan(&after, &saved); err != nil {
		t.Fatal(err)
	}
	if after != before || saved != nil {
		t.Errorf("after release: wait_timeout %d (want %d), @dlock_wait_timeout %v (want NULL)", after, before, saved)
	}
}

// TestCloseKeepsUserDB: closing a Locker built on the caller's *sql.DB
// leaves that DB open; closing one opened from a URL closes its own.
func TestCloseKeepsUserDB(t *testing.T) {
	ctx := testContext(t, 30*time.Second)
	db := newDB(t, nil)
	l := lockerOn(t, db, mysqllock.Options{})
	lease, err := l.Acquire(ctx, "close")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(lease.Err(), dlock.ErrReleased) {
		t.Errorf("after Close, Err() = %v, want ErrReleased", lease.Err())
	}
	if err := db.PingContext(ctx); err != nil {
		t.Errorf("the caller's *sql.DB after Close: %v", err)
	}
	if _, err := l.Driver().TryLock(ctx, requestFor("close")); !errors.Is(err, dlock.ErrClosed) {
		t.Errorf("TryLock after Close = %v, want ErrClosed", err)
	}
}
