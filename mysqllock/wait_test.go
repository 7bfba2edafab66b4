package mysqllock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/locktest"
	"github.com/dlockgo/dlock/mysqllock"
)

// TestCancelledWaitLeavesNothing: a wait ended by its context's deadline,
// by a cancel or by Close leaves no statement queued on the server, and
// the waiter's connection is gone; the lock is free the moment the holder
// releases it.
func TestCancelledWaitLeavesNothing(t *testing.T) {
	ctx := testContext(t, 60*time.Second)
	o := mysqllock.Options{Table: testTable(t)}
	holder, d := newLocker(t, o)
	adm := newAdmin(t)
	const name = "cancel/wait"
	key := d.LockName(name)
	for _, how := range []string{"deadline", "cancel", "close"} {
		t.Run(how, func(t *testing.T) {
			adm := &admin{t: t, db: adm.db}
			lease, err := holder.Acquire(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			waiter, wd := newLocker(t, o)
			wctx, cancel := context.WithCancel(ctx)
			defer cancel()
			if how == "deadline" {
				wctx, cancel = context.WithTimeout(ctx, 500*time.Millisecond)
				defer cancel()
			}
			errc := make(chan error, 1)
			go func() {
				l, err := waiter.Acquire(wctx, name)
				if err == nil {
					_ = l.Release(ctx)
				}
				errc <- err
			}()
			if !eventually(5*time.Second, func() bool { return adm.waiters(key) == 1 }) {
				t.Fatal("the waiter never showed in SHOW PROCESSLIST in state \"User lock\"")
			}
			var waiterID int64
			row := adm.db.QueryRow("SELECT ID FROM information_schema.PROCESSLIST WHERE STATE = 'User lock' AND INFO LIKE ?", "%GET_LOCK('"+key+"'%")
			if err := row.Scan(&waiterID); err != nil {
				t.Fatal(err)
			}
			switch how {
			case "cancel":
				cancel()
			case "close":
				if err := wd.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
			}
			start := time.Now()
			err = <-errc
			took := time.Since(start)
			want := map[string]error{"deadline": context.DeadlineExceeded, "cancel": context.Canceled, "close": dlock.ErrClosed}[how]
			if !errors.Is(err, want) {
				t.Errorf("Acquire = %v, want an error matching %v", err, want)
			}
			if how != "deadline" && took > 2*time.Second { // a hang bound
				t.Errorf("Acquire returned %v after the %s", took, how)
			}
			// Nothing is left: no queued statement, no connection.
			if n := adm.waiters(key); n != 0 {
				t.Errorf("%d statements still queued for the lock after Acquire returned", n)
			}
			if adm.alive(waiterID) && !eventually(time.Second, func() bool { return !adm.alive(waiterID) }) {
				t.Errorf("the waiter's connection %d is still open 1s after Acquire returned", waiterID)
			}
			if err := lease.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if id := adm.holder(key); id != 0 {
				t.Errorf("after the release, connection %d holds the lock", id)
			}
		})
	}
}

// heldElsewhere takes name with a Locker of its own on a table of the
// test's own, and holds it until t ends; it returns the options of that
// table, for the waiters, and the lock's name on the server.
func heldElsewhere(t *testing.T, ctx context.Context, name string) (mysqllock.Options, string) {
	t.Helper()
	o := mysqllock.Options{Table: testTable(t)}
	holder, d := newLocker(t, o)
	lease, err := holder.Acquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lease.Release(ctx) })
	return o, d.LockName(name)
}

// TestCancelFallback: when no connection is free for the KILL QUERY (the
// pool is full), the cancelled wait closes its own connection instead,
// within a bounded time, and the server drops the waiter soon after.
func TestCancelFallback(t *testing.T) {
	ctx := testContext(t, 30*time.Second)
	o, key := heldElsewhere(t, ctx, "fallback")
	adm := newAdmin(t)
	db := newDB(t, nil)
	db.SetMaxOpenConns(1)
	waiter := lockerOn(t, db, o)
	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := waiter.Acquire(wctx, "fallback"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Acquire = %v, want DeadlineExceeded", err)
	}
	took := time.Since(start)
	t.Logf("Acquire returned %v after its start (deadline 300ms)", took)
	if took > 3*time.Second {
		t.Errorf("Acquire took %v with no connection free for the KILL", took)
	}
	returned := time.Now()
	if !eventually(5*time.Second, func() bool { return adm.waiters(key) == 0 }) {
		t.Error("the waiter is still queued 5s after its connection was closed")
	}
	t.Logf("the closed waiter left the server's queue %v after Acquire returned", time.Since(returned).Round(time.Millisecond))
}

// TestWaitersQueueInProcess: 300 goroutines waiting on one name through
// one driver each get the lock in turn, one at a time, while the driver
// has at most one of them waiting on the server and a handful of
// connections in use (one per waiter would pass the server's
// max_connections of 151); a waiter whose context ends leaves the queue
// at once with its context's error.
func TestWaitersQueueInProcess(t *testing.T) {
	ctx := testContext(t, 120*time.Second)
	l, d := newLocker(t, mysqllock.Options{})
	adm := newAdmin(t)
	const name, n = "queue/one", 300
	key := d.LockName(name)
	first, err := l.Acquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}

	turns := locktest.StartTurns(t, ctx, []*dlock.Locker{l}, name, n)

	// A waiter that gives up while queued behind the others.
	late, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := l.Acquire(late, name); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("queued Acquire = %v, want DeadlineExceeded", err)
	}
	if took := time.Since(start); took > 3*time.Second { // a hang bound, 10× the deadline
		t.Errorf("the queued Acquire returned %v after its start (deadline 300ms)", took)
	}
	if !eventually(5*time.Second, func() bool { return adm.waiters(key) == 1 }) {
		t.Errorf("%d statements queued on the server for %d waiters of one driver, want 1", adm.waiters(key), n)
	}

	var maxInUse, maxWaiting int
	sample := func() {
		maxInUse = max(maxInUse, d.DB().Stats().InUse)
		maxWaiting = max(maxWaiting, adm.waiters(key))
	}
	sample()
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for waiting := true; waiting; {
		select {
		case <-turns.Done():
			waiting = false
		case <-time.After(5 * time.Millisecond):
			sample()
		}
	}
	turns.Check(first.Token())
	t.Logf("at most %d connections in use and %d waiting on the server", maxInUse, maxWaiting)
	if maxWaiting > 1 {
		t.Errorf("%d statements waited on the server at once, want at most 1", maxWaiting)
	}
	// A holder, the next waiter, and one releasing or being checked out.
	if maxInUse > 4 {
		t.Errorf("%d connections in use at once, want at most 4", maxInUse)
	}
}

// TestCloseEndsQueuedWaiters: Close ends the driver's waiters for a name,
// the one at the server and those queued in the process, with ErrClosed,
// and leaves nothing queued on the server.
func TestCloseEndsQueuedWaiters(t *testing.T) {
	ctx := testContext(t, 30*time.Second)
	const name, n = "queue/close", 5
	o, key := heldElsewhere(t, ctx, name)
	adm := newAdmin(t)
	waiter, wd := newLocker(t, o)
	errc := make(chan error, n)
	for range n {
		go func() { _, err := waiter.Acquire(ctx, name); errc <- err }()
	}
	if !eventually(5*time.Second, func() bool { return adm.waiters(key) == 1 }) {
		t.Fatal("no waiter showed on the server")
	}
	time.Sleep(50 * time.Millisecond) // the others reach the queue
	start := time.Now()
	if err := wd.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	for range n {
		if err := <-errc; !errors.Is(err, dlock.ErrClosed) {
			t.Errorf("Acquire = %v, want ErrClosed", err)
		}
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("the waiters returned %v after Close", took)
	}
	if w := adm.waiters(key); w != 0 {
		t.Errorf("%d statements still queued on the server after Close", w)
	}
}
