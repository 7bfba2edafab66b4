package memlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/memlock"
)

// Tests of memlock's queue and observers at the driver level, where the
// suite cannot look: who is admitted when, and what observers see.

func req(name, owner string, mode driver.Mode) driver.Request {
	r := driver.Request{Name: name, Owner: owner, TTL: time.Minute, Mode: mode}
	if mode == driver.Permit {
		r.Limit = 2
	}
	return r
}

// lockAsync starts d.Lock and returns a channel of its outcome.
func lockAsync(ctx context.Context, d *memlock.Driver, r driver.Request) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := d.Lock(ctx, r)
		done <- err
	}()
	return done
}

func waitErr(t *testing.T, ch <-chan error, what string) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(2 * time.Second):
		t.Fatalf("%s: still waiting", what)
		return nil
	}
}

func stillWaiting(t *testing.T, ch <-chan error, what string) {
	t.Helper()
	select {
	case err := <-ch:
		t.Fatalf("%s returned (%v); it should wait", what, err)
	case <-time.After(20 * time.Millisecond):
	}
}

func TestReadersBehindAWriter(t *testing.T) {
	ctx := context.Background()
	d := memlock.NewStore().Driver()
	if _, err := d.TryLock(ctx, req("x", "w1", driver.Write)); err != nil {
		t.Fatal(err)
	}
	r1 := lockAsync(ctx, d, req("x", "r1", driver.Read))
	stillWaiting(t, r1, "a reader while a writer holds")
	r2 := lockAsync(ctx, d, req("x", "r2", driver.Read))
	stillWaiting(t, r2, "a second reader")
	wctx, cancelW := context.WithCancel(ctx)
	w2 := lockAsync(wctx, d, req("x", "w2", driver.Write))
	stillWaiting(t, w2, "a second writer")
	r3 := lockAsync(ctx, d, req("x", "r3", driver.Read))
	stillWaiting(t, r3, "a reader behind a waiting writer")

	// The writer leaves: the two readers ahead of w2 enter together, r3
	// stays behind w2.
	if err := d.Unlock(ctx, req("x", "w1", driver.Write)); err != nil {
		t.Fatal(err)
	}
	if err := waitErr(t, r1, "r1"); err != nil {
		t.Fatal(err)
	}
	if err := waitErr(t, r2, "r2"); err != nil {
		t.Fatal(err)
	}
	stillWaiting(t, r3, "a reader behind a waiting writer, after the readers ahead entered")
	if _, err := d.TryLock(ctx, req("x", "r4", driver.Read)); !errors.Is(err, driver.ErrNotAcquired) {
		t.Errorf("TryLock(read) while a writer waits = %v, want ErrNotAcquired", err)
	}

	// w2 gives up: r3, behind it, joins the readers at once.
	cancelW()
	if err := waitErr(t, w2, "w2"); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled writer: %v", err)
	}
	if err := waitErr(t, r3, "r3 after the writer ahead gave up"); err != nil {
		t.Fatal(err)
	}
	for _, o := range []string{"r1", "r2", "r3"} {
		if err := d.Unlock(ctx, req("x", o, driver.Read)); err != nil {
			t.Errorf("Unlock(%s): %v", o, err)
		}
	}
	if _, err := d.TryLock(ctx, req("x", "w3", driver.Write)); err != nil {
		t.Errorf("TryLock(write) once everyone left: %v", err)
	}
}

func TestExpiryAdmitsWaiter(t *testing.T) {
	ctx := context.Background()
	d := memlock.NewStore().Driver()
	crashed := req("s", "c", driver.Permit)
	crashed.TTL = 50 * time.Millisecond
	// The permit expires a TTL after its TryLock, which starts after sent:
	// a grant less than a TTL after sent came before the expiry, however
	// late this goroutine runs.
	sent := time.Now()
	for _, o := range []driver.Request{crashed, req("s", "k", driver.Permit)} {
		if _, err := d.TryLock(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	w := lockAsync(ctx, d, req("s", "w", driver.Permit))
	if err := waitErr(t, w, "a waiter for a crashed holder's permit"); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(sent); took < crashed.TTL {
		t.Errorf("the waiter got the permit %v after the holder asked for it, before the holder's TTL %v", took, crashed.TTL)
	}
	if _, err := d.Renew(ctx, crashed); !errors.Is(err, driver.ErrNotHeld) {
		t.Errorf("Renew of the expired permit = %v, want ErrNotHeld", err)
	}
}

func TestObserve(t *testing.T) {
	ctx := context.Background()
	d := memlock.NewStore().Driver()
	octx, stop := context.WithCancel(ctx)
	ch, err := d.Observe(octx, "e")
	if err != nil {
		t.Fatal(err)
	}
	if v := <-ch; v != (driver.LeaderInfo{}) {
		t.Errorf("first value = %+v, want zero", v)
	}

	// Changes the reader does not keep up with: it gets the latest.
	var last driver.Grant
	for i, o := range []string{"a", "b", "c"} {
		r := req("e", o, driver.Leader)
		r.Value = o
		g, err := d.TryLock(ctx, r)
		if err != nil {
			t.Fatal(i, err)
		}
		last = g
		if o != "c" {
			if err := d.Unlock(ctx, r); err != nil {
				t.Fatal(err)
			}
		}
	}
	if v := <-ch; v != (driver.LeaderInfo{Value: "c", Token: last.Token}) {
		t.Errorf("after three leaders = %+v, want c with token %d", v, last.Token)
	}

	r := req("e", "c", driver.Leader)
	r.Value = "c"
	if err := d.Unlock(ctx, r); err != nil {
		t.Fatal(err)
	}
	select {
	case v := <-ch:
		if v != (driver.LeaderInfo{}) {
			t.Errorf("after c resigned = %+v, want zero", v)
		}
	case <-time.After(time.Second):
		t.Fatal("no value after c resigned")
	}

	// A leader comes and goes before the reader looks: nothing to read,
	// since the reader's latest value, nobody, is current again.
	y := req("e", "y", driver.Leader)
	if _, err := d.TryLock(ctx, y); err != nil {
		t.Fatal(err)
	}
	if err := d.Unlock(ctx, y); err != nil {
		t.Fatal(err)
	}
	select {
	case v := <-ch:
		t.Errorf("got %+v after a leader came and went; the reader already had the current value", v)
	case <-time.After(20 * time.Millisecond):
	}

	// A leader that stops renewing is seen gone when its TTL ends, with
	// nobody touching the store.
	crashed := req("e", "x", driver.Leader)
	crashed.Value, crashed.TTL = "x", 50*time.Millisecond
	g, err := d.TryLock(ctx, crashed)
	if err != nil {
		t.Fatal(err)
	}
	if v := <-ch; v != (driver.LeaderInfo{Value: "x", Token: g.Token}) {
		t.Errorf("= %+v, want x", v)
	}
	select {
	case v := <-ch:
		if v != (driver.LeaderInfo{}) {
			t.Errorf("after x expired = %+v, want zero", v)
		}
	case <-time.After(time.Second):
		t.Fatal("the observer did not see the leader expire")
	}

	stop()
	select {
	case _, ok := <-ch:
		if ok {
			t.Error("a value after the observer's ctx ended")
		}
	case <-time.After(time.Second):
		t.Fatal("the channel was not closed when the observer's ctx ended")
	}
}

// TestLeaderExpires: with nobody observing or waiting, Leader still
// reports no leader once the leader's TTL has passed.
func TestLeaderExpires(t *testing.T) {
	ctx := context.Background()
	d := memlock.NewStore().Driver()
	r := req("e", "x", driver.Leader)
	r.Value, r.TTL = "x", 30*time.Millisecond
	g, err := d.TryLock(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	if info, err := d.Leader(ctx, "e"); err != nil || info != (driver.LeaderInfo{Value: "x", Token: g.Token}) {
		t.Fatalf("Leader() = %+v, %v; want x", info, err)
	}
	time.Sleep(40 * time.Millisecond)
	if info, err := d.Leader(ctx, "e"); err != nil || info != (driver.LeaderInfo{}) {
		t.Errorf("Leader() after the leader's TTL = %+v, %v; want nobody", info, err)
	}
	ch, err := d.Observe(ctx, "e")
	if err != nil {
		t.Fatal(err)
	}
	if info := <-ch; info != (driver.LeaderInfo{}) {
		t.Errorf("first value observed after the leader's TTL = %+v, want nobody", info)
	}
	_ = d.Close()
}
