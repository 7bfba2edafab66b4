package pglock_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/pglock"
)

// Inspect lists the held mutexes and leaders under a prefix with the
// tokens of their grants, their sessions' pids and the sessions waiting,
// and nothing released, elsewhere, of another kind or of another table.
func TestInspect(t *testing.T) {
	ctx := t.Context()
	adm := newAdmin(t)
	l := newLocker(t, pglock.Options{})
	d := newDriver(t, pglock.Options{})
	stranger := newLocker(t, pglock.Options{Table: table + "_x"})
	t.Cleanup(func() { _ = dropTable(table + "_x") })

	take := func(lease *dlock.Lease, err error) *dlock.Lease {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return lease
	}
	a := take(l.Acquire(ctx, "jobs/a"))
	gone := take(l.Acquire(ctx, "jobs/b"))
	if err := gone.Release(ctx); err != nil {
		t.Fatal(err)
	}
	take(l.Acquire(ctx, "elsewhere"))
	take(stranger.Acquire(ctx, "jobs/c"))
	take(l.AcquireRead(ctx, "jobs/rw"))
	lead := take(l.Campaign(ctx, "jobs/e", "me"))
	// An observer waits on the election's key too, with a shared request:
	// it is no candidate.
	octx, stop := context.WithCancel(ctx)
	defer stop()
	if _, err := l.Observe(octx, "jobs/e"); err != nil {
		t.Fatal(err)
	}

	// Two waiters queue behind jobs/a, one candidate behind the leader,
	// each through a driver of its own: a driver's other waiters on a lock
	// wait in the process, and its waiters on a lock it holds never reach
	// the server.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	waiting := make(chan error, 3)
	w1, w2, w3 := newLocker(t, pglock.Options{}), newLocker(t, pglock.Options{}), newLocker(t, pglock.Options{})
	for _, wait := range []func() error{
		func() error { _, err := w1.Acquire(wctx, "jobs/a"); return err },
		func() error { _, err := w2.Acquire(wctx, "jobs/a"); return err },
		func() error { _, err := w3.Campaign(wctx, "jobs/e", "next"); return err },
	} {
		go func() { waiting <- wait() }()
	}
	if !waitUntil(5*time.Second, func() bool {
		_, w := adm.lockRows(t, table, "jobs/a")
		return w == 2
	}) {
		t.Fatal("the waiters did not queue")
	}
	// The candidate's request and the observer's wait on the election.
	if !waitUntil(5*time.Second, func() bool {
		_, w := adm.keyRows(t, pglock.ModeKey(table, driver.Leader, "jobs/e", 0))
		return w == 2
	}) {
		t.Fatal("the candidate and the observer did not queue")
	}

	pid := func(k int64) string {
		holders, _ := adm.keyRows(t, k)
		if len(holders) != 1 {
			t.Fatalf("key %d has holders %v", k, holders)
		}
		return fmt.Sprintf("pid %d", holders[0])
	}
	got, err := d.Inspect(ctx, "jobs/")
	if err != nil {
		t.Fatal(err)
	}
	want := []driver.LockInfo{
		{Name: "jobs/a", Mode: driver.Exclusive, Token: a.Token(), Owner: pid(pglock.Key(table, "jobs/a")), Waiters: 2},
		{Name: "jobs/e", Mode: driver.Leader, Token: lead.Token(), Owner: pid(pglock.ModeKey(table, driver.Leader, "jobs/e", 0)), Waiters: 1},
	}
	if !slices.Equal(got, want) {
		t.Errorf("Inspect(jobs/) =\n%+v, want\n%+v", got, want)
	}

	testenv.CheckInspectNames(t, ctx, d, []testenv.PrefixNames{
		{Prefix: "jobs/a", Names: []string{"jobs/a"}},
		{Prefix: "else", Names: []string{"elsewhere"}},
		{Prefix: "", Names: []string{"elsewhere", "jobs/a", "jobs/e"}},
		{Prefix: "nothing"},
		{Prefix: "'; --"},
	})
	cancel()
	for range 3 {
		<-waiting
	}
}
