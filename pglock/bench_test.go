package pglock_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/locktest"
	"github.com/dlockgo/dlock/pglock"
)

// The benchmarks run against the test server (DLOCK_PG_URL). ns/op is an
// acquire+release pair through a dlock.Locker; for Contended8 it is wall
// time per acquisition with 8 contenders, so 1e9/ns is the hand-over rate.
// allocs/op counts the whole process (the keeper goroutine included).

func BenchmarkUncontended(b *testing.B) {
	l := newLocker(b, pglock.Options{})
	// connect and prepare outside the timer
	locktest.BenchCycle(b, context.Background(), locktest.Kind(l, "mutex", "bench/u/"+randomHex(4)))
}

// BenchmarkParallel: 16 goroutines, each with a name of its own, share one
// Locker; with MaxIdle at its default and at 16 (enough idle connections
// for every goroutine, so that no release closes one).
func BenchmarkParallel(b *testing.B) {
	for _, maxIdle := range []int{0, 16} {
		b.Run("max_idle="+strconv.Itoa(maxIdle), func(b *testing.B) {
			ctx := context.Background()
			l := newLocker(b, pglock.Options{MaxIdle: maxIdle})
			base := "bench/p/" + randomHex(4) + "/"
			locktest.Warm(b, l, base+"warm")
			b.ResetTimer()
			locktest.BenchParallel(b, 16, base, func(name string) error { return locktest.Cycle(ctx, l, name) })
		})
	}
}

// BenchmarkContended8: 8 goroutines take one name b.N times in all, through
// one shared Locker ("shared") or a Locker each, as 8 processes would
// ("lockers").
func BenchmarkContended8(b *testing.B) {
	const contenders = 8
	for _, shared := range []bool{true, false} {
		mode := "lockers"
		if shared {
			mode = "shared"
		}
		b.Run(mode, func(b *testing.B) {
			lockers := make([]*dlock.Locker, contenders)
			for i := range lockers {
				if i == 0 || !shared {
					lockers[i] = newLocker(b, pglock.Options{MaxIdle: contenders})
				} else {
					lockers[i] = lockers[0]
				}
			}
			name := "bench/c/" + randomHex(4)
			for _, l := range lockers {
				locktest.Warm(b, l, name)
			}
			locktest.BenchContend(b, context.Background(), contenders, locktest.Acquirers(lockers, name))
		})
	}
}

// BenchmarkStatements measures, on one connection, what taking and
// releasing a lock costs with the fencing token written in the lock's
// statement ("lock+token"), without any token ("lock only"), and with the
// token written by a second statement ("lock, then token").
func BenchmarkStatements(b *testing.B) {
	ctx := context.Background()
	newDriver(b, pglock.Options{}) // creates the table
	c := testenv.PGConn(b)
	name := "bench/s/" + randomHex(4)
	k := pglock.Key(table, name)
	one := `WITH l AS (SELECT pg_try_advisory_lock($1) AS ok)
INSERT INTO ` + table + ` AS t (name, token, acquired)
SELECT $2, nextval('` + table + `_seq'), clock_timestamp() FROM l WHERE l.ok
ON CONFLICT (name) DO UPDATE SET token = greatest(t.token + 1, excluded.token), acquired = excluded.acquired
RETURNING t.token`
	upsert := `INSERT INTO ` + table + ` AS t (name, token, acquired) VALUES ($1, nextval('` + table + `_seq'), clock_timestamp())
ON CONFLICT (name) DO UPDATE SET token = greatest(t.token + 1, excluded.token), acquired = excluded.acquired
RETURNING t.token`
	unlock := func(b *testing.B) {
		var ok bool
		if err := c.QueryRow(ctx, "SELECT pg_advisory_unlock($1)", k).Scan(&ok); err != nil || !ok {
			b.Fatal(ok, err)
		}
	}
	for _, s := range []struct {
		name string
		lock func(b *testing.B)
	}{
		{"lock+token", func(b *testing.B) {
			var tok int64
			if err := c.QueryRow(ctx, one, k, name).Scan(&tok); err != nil {
				b.Fatal(err)
			}
		}},
		{"lock_only", func(b *testing.B) {
			var ok bool
			if err := c.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", k).Scan(&ok); err != nil || !ok {
				b.Fatal(ok, err)
			}
		}},
		{"lock_then_token", func(b *testing.B) {
			var ok bool
			if err := c.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", k).Scan(&ok); err != nil || !ok {
				b.Fatal(ok, err)
			}
			var tok int64
			if err := c.QueryRow(ctx, upsert, name).Scan(&tok); err != nil {
				b.Fatal(err)
			}
		}},
	} {
		b.Run(s.name, func(b *testing.B) {
			s.lock(b)
			unlock(b)
			b.ReportAllocs()
			for b.Loop() {
				s.lock(b)
				unlock(b)
			}
		})
	}
}

// BenchmarkKinds: acquire+release of each kind of lock, uncontended,
// through a dlock.Locker with a warm idle connection (Campaign+Release for
// the election).
func BenchmarkKinds(b *testing.B) {
	locktest.BenchKinds(b, func(b *testing.B) *dlock.Locker { return newLocker(b, pglock.Options{}) },
		"bench/k/"+randomHex(4), "read", "write", "permit4", "campaign")
}

// countingTracer counts the queries and prepares pgx sends.
type countingTracer struct{ queries, prepares atomic.Int64 }

func (c *countingTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.queries.Add(1)
	return ctx
}
func (c *countingTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (c *countingTracer) TracePrepareStart(ctx context.Context, _ *pgx.Conn, _ pgx.TracePrepareStartData) context.Context {
	c.prepares.Add(1)
	return ctx
}
func (c *countingTracer) TracePrepareEnd(context.Context, *pgx.Conn, pgx.TracePrepareEndData) {}

// TestOneRoundTrip: with a warm idle connection, an uncontended Acquire
// sends one statement (the lock and its token together), and Release one.
func TestOneRoundTrip(t *testing.T) {
	ctx := testContext(t, 30*time.Second)
	cfg := config(t)
	tr := &countingTracer{}
	cfg.Tracer = tr
	d, err := pglock.NewDriver(ctx, cfg, &pglock.Options{Table: table, Keepalive: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	l, err := dlock.New(d)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	name := "roundtrip/" + randomHex(4)
	for _, try := range []bool{false, true} {
		acquire := l.Acquire
		if try {
			acquire = l.TryAcquire
		}
		warm, err := acquire(ctx, name) // prepares the statements on the connection
		if err != nil {
			t.Fatal(err)
		}
		_ = warm.Release(ctx)
		q0, p0 := tr.queries.Load(), tr.prepares.Load()
		lease, err := acquire(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		q1, p1 := tr.queries.Load(), tr.prepares.Load()
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
		q2, p2 := tr.queries.Load(), tr.prepares.Load()
		if q1-q0 != 1 || p1 != p0 {
			t.Errorf("try=%v: acquire sent %d queries and %d prepares, want 1 and 0", try, q1-q0, p1-p0)
		}
		if q2-q1 != 1 || p2 != p1 {
			t.Errorf("try=%v: release sent %d queries and %d prepares, want 1 and 0", try, q2-q1, p2-p1)
		}
	}
}
