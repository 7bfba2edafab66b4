package pglock_test

import (
	"context"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/pglock"
)

// The benchmarks run against the test server (DLOCK_PG_URL). ns/op is an
// acquire+release pair through a dlock.Locker; for Contended8 it is wall
// time per acquisition with 8 contenders, so 1e9/ns is the hand-over rate.
// allocs/op counts the whole process (the keeper goroutine included).

// lockRelease acquires and releases name, or fails b.
func lockRelease(b *testing.B, ctx context.Context, l *dlock.Locker, name string) {
	lease, err := l.Acquire(ctx, name)
	if err != nil {
		b.Fatal(err)
	}
	if err := lease.Release(ctx); err != nil {
		b.Fatal(err)
	}
}

func BenchmarkUncontended(b *testing.B) {
	ctx := context.Background()
	l := newLocker(b, pglock.Options{})
	name := "bench/u/" + randomHex(4)
	lockRelease(b, ctx, l, name) // connect and prepare outside the timer
	b.ReportAllocs()
	for b.Loop() {
		lockRelease(b, ctx, l, name)
	}
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
			lockRelease(b, ctx, l, base+"warm")
			var next atomic.Int64
			b.SetParallelism(max(1, 16/runtime.GOMAXPROCS(0))) // 16 goroutines
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				name := base + strconv.FormatInt(next.Add(1), 10)
				for pb.Next() {
					lockRelease(b, ctx, l, name)
				}
			})
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
			ctx := context.Background()
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
				lockRelease(b, ctx, l, name)
			}
			var (
				n       atomic.Int64
				holders atomic.Int32
				wg      sync.WaitGroup
			)
			b.ReportAllocs()
			b.ResetTimer()
			for w := range contenders {
				wg.Go(func() {
					for n.Add(1) <= int64(b.N) {
						lease, err := lockers[w].Acquire(ctx, name)
						if err != nil {
							b.Error(err)
							return
						}
						if holders.Add(1) != 1 {
							b.Error("two holders at once")
						}
						holders.Add(-1)
						if err := lease.Release(ctx); err != nil {
							b.Error(err)
						}
					}
				})
			}
			wg.Wait()
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
	ctx := context.Background()
	for _, k := range []struct {
		name string
		take func(l *dlock.Locker, name string) (*dlock.Lease, error)
	}{
		{"read", func(l *dlock.Locker, n string) (*dlock.Lease, error) { return l.AcquireRead(ctx, n) }},
		{"write", func(l *dlock.Locker, n string) (*dlock.Lease, error) { return l.AcquireWrite(ctx, n) }},
		{"permit4", func(l *dlock.Locker, n string) (*dlock.Lease, error) { return l.AcquirePermit(ctx, n, 4) }},
		{"campaign", func(l *dlock.Locker, n string) (*dlock.Lease, error) { return l.Campaign(ctx, n, "bench") }},
	} {
		b.Run(k.name, func(b *testing.B) {
			l := newLocker(b, pglock.Options{})
			name := "bench/k/" + randomHex(4)
			cycle := func() {
				lease, err := k.take(l, name)
				if err != nil {
					b.Fatal(err)
				}
				if err := lease.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
			cycle()
			b.ReportAllocs()
			for b.Loop() {
				cycle()
			}
		})
	}
}
