package pglock_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/pglock"
)

// keySQL is the SQL that the documentation of Key gives for a key.
const keySQL = `SELECT ('x' || encode(substr(sha256(convert_to('dlock/' || $1::text || '/' || $2::text, 'UTF8')), 1, 8), 'hex'))::bit(64)::bigint`

// TestKey: the documented SQL computes the same key as Key; the key
// depends on the table and the name; a held lock shows in pg_locks under
// its key's classid and objid.
func TestKey(t *testing.T) {
	ctx := testContext(t, 30*time.Second)
	adm := newAdmin(t)
	names := []string{"a", "orders/42", "A.b-c_d:e@f+g=h", strings.Repeat("y", dlock.MaxNameLen)}
	tables := []string{pglock.DefaultTable, "locks.dlock_tokens", table}
	seen := map[int64]string{}
	for _, tbl := range tables {
		for _, name := range names {
			k := pglock.Key(tbl, name)
			var sqlKey int64
			adm.mu.Lock()
			err := adm.c.QueryRow(ctx, keySQL, tbl, name).Scan(&sqlKey)
			adm.mu.Unlock()
			if err != nil {
				t.Fatal(err)
			}
			if sqlKey != k {
				t.Errorf("Key(%q, %q) = %d, the documented SQL says %d", tbl, name, k, sqlKey)
			}
			if prev, dup := seen[k]; dup {
				t.Errorf("Key(%q, %q) = Key of %s", tbl, name, prev)
			}
			seen[k] = tbl + " " + name
		}
	}

	// The key in pg_locks.
	l := newLocker(t, pglock.Options{})
	name := "key/" + randomHex(4)
	lease, err := l.Acquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(ctx)
	var classid, objid uint32
	adm.mu.Lock()
	err = adm.c.QueryRow(ctx, `SELECT classid::bigint, objid::bigint FROM pg_locks
WHERE locktype = 'advisory' AND objsubid = 1 AND pid = $1`, int32(pglock.HolderPID(l.Driver().(*pglock.Driver), lease.Owner()))).Scan(&classid, &objid)
	adm.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	k := uint64(pglock.Key(table, name))
	if classid != uint32(k>>32) || objid != uint32(k) {
		t.Errorf("pg_locks shows classid %d objid %d, want %d %d", classid, objid, uint32(k>>32), uint32(k))
	}
}

func TestTableNames(t *testing.T) {
	good := []string{"dlock_tokens", "_x", "a1", "locks.dlock_tokens", strings.Repeat("t", 59), strings.Repeat("s", 63) + ".t"}
	bad := []string{"Upper", "1abc", "a-b", "a b", `"quoted"`, "a.b.c", ".t", "s.", "t;drop", strings.Repeat("t", 60), strings.Repeat("s", 64) + ".t", "é"}
	ctx := context.Background()
	for _, tbl := range bad {
		if d, err := pglock.NewDriver(ctx, config(t), &pglock.Options{Table: tbl}); err == nil {
			_ = d.Close()
			t.Errorf("NewDriver with table %q succeeded", tbl)
		}
	}
	for _, tbl := range good {
		// NoMigrate: only the name is checked; nothing is created.
		d, err := pglock.NewDriver(ctx, config(t), &pglock.Options{Table: tbl, NoMigrate: true})
		if err != nil {
			t.Errorf("NewDriver with table %q: %v", tbl, err)
			continue
		}
		_ = d.Close()
	}
}

func BenchmarkKey(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		pglock.Key(pglock.DefaultTable, "orders/42")
	}
}
