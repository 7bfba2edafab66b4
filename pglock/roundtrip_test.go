package pglock_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/pglock"
)

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
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
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
