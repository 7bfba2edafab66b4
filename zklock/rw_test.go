package zklock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/locktest"
	"github.com/dlockgo/dlock/zklock"
)

// TestRWReadersTogether: readers hold the lock together, a writer cannot
// have it meanwhile, and the readers-writer lock "x" is not the mutex "x".
func TestRWReadersTogether(t *testing.T) {
	ctx := locktest.Context(t, 30*time.Second)
	servers := []string{testenv.ZKAddr(t)}
	prefix := testPrefix()
	w, _ := newLocker(t, servers, prefix, 5*time.Second)
	mutex := locktest.Must(t)(w.TryAcquire(ctx, "rw"))
	var leases []*dlock.Lease
	var last uint64
	for i := range 5 {
		l, _ := newLocker(t, servers, prefix, 5*time.Second)
		lease, err := l.TryAcquireRead(ctx, "rw")
		if err != nil {
			t.Fatalf("reader %d, while %d readers and the mutex of the same name hold: %v", i, i, err)
		}
		if lease.Token() <= last {
			t.Errorf("reader %d: token %d, not above the previous reader's %d", i, lease.Token(), last)
		}
		last = lease.Token()
		leases = append(leases, lease)
	}
	if _, err := w.TryAcquireWrite(ctx, "rw"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryAcquireWrite while readers hold = %v, want ErrNotAcquired", err)
	}
	for _, l := range leases {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	wl, err := w.TryAcquireWrite(ctx, "rw")
	if err != nil {
		t.Fatalf("TryAcquireWrite once the readers left: %v", err)
	}
	if wl.Token() <= last {
		t.Errorf("writer's token %d is not above the last reader's %d", wl.Token(), last)
	}
	if _, err := w.TryAcquireRead(ctx, "rw"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("TryAcquireRead while a writer holds = %v, want ErrNotAcquired", err)
	}
	_ = wl.Release(ctx)
	_ = mutex.Release(ctx)
}

// TestRWWriterPreference: a waiting writer stops the readers that come
// after it; it goes first, then they do.
func TestRWWriterPreference(t *testing.T) {
	ctx := locktest.Context(t, 30*time.Second)
	servers := []string{testenv.ZKAddr(t)}
	prefix := testPrefix()
	adm := newAdmin(t, servers)
	dir := prefix + "/#rw/pref"
	r1, _ := newLocker(t, servers, prefix, 5*time.Second)
	w, _ := newLocker(t, servers, prefix, 5*time.Second)
	r2, _ := newLocker(t, servers, prefix, 5*time.Second)
	first := locktest.Must(t)(r1.AcquireRead(ctx, "pref"))
	type event struct {
		who  string
		at   time.Time
		tok  uint64
		done time.Time
	}
	events := make(chan event, 2)
	go func() {
		lease, err := w.AcquireWrite(ctx, "pref")
		if err != nil {
			t.Errorf("writer: %v", err)
			events <- event{who: "writer failed"}
			return
		}
		at := time.Now()
		time.Sleep(100 * time.Millisecond)
		done := time.Now()
		if err := lease.Release(ctx); err != nil {
			t.Errorf("writer: release: %v", err)
		}
		events <- event{"writer", at, lease.Token(), done}
	}()
	adm.waitNodes(dir, 2, 5*time.Second)
	if _, err := r2.TryAcquireRead(ctx, "pref"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryAcquireRead while a writer waits = %v, want ErrNotAcquired", err)
	}
	go func() {
		lease, err := r2.AcquireRead(ctx, "pref")
		if err != nil {
			t.Errorf("second reader: %v", err)
			events <- event{who: "reader failed"}
			return
		}
		at := time.Now()
		_ = lease.Release(ctx)
		events <- event{"reader", at, lease.Token(), at}
	}()
	adm.waitNodes(dir, 3, 5*time.Second)
	time.Sleep(100 * time.Millisecond) // the second reader would have got in by now
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	a, b := <-events, <-events
	if a.who != "writer" || b.who != "reader" {
		t.Fatalf("order %q, %q; want the writer, then the reader that came after it", a.who, b.who)
	}
	if b.at.Before(a.done) {
		t.Errorf("the reader got the lock %v before the writer released it", a.done.Sub(b.at))
	}
	if !(first.Token() < a.tok && a.tok < b.tok) {
		t.Errorf("tokens %d, %d, %d do not increase in the order of service", first.Token(), a.tok, b.tok)
	}
}

// TestRWWatchOnlyWhatIsNeeded queues readers and writers behind a writer:
// W0 holds, then R1 R2 R3 W4 R5 R6 queue. Each waiter watches one node:
// a reader its nearest write node before it, a writer the node just before
// it. Each release wakes only the waiters it concerns, and a waiter whose
// predecessor's release lets it in holds without listing the children.
// On the standalone server and on the ensemble.
func TestRWWatchOnlyWhatIsNeeded(t *testing.T) {
	t.Run("standalone", func(t *testing.T) { testRWWatchOnlyWhatIsNeeded(t, []string{testenv.ZKAddr(t)}) })
	t.Run("ensemble", func(t *testing.T) { testRWWatchOnlyWhatIsNeeded(t, testenv.ZKEnsembleAddrs(t)) })
}

func testRWWatchOnlyWhatIsNeeded(t *testing.T, servers []string) {
	ctx := locktest.Context(t, 60*time.Second)
	prefix := testPrefix()
	adm := newAdmin(t, servers)
	dir := prefix + "/#rw/herd"
	h, _ := newLocker(t, servers, prefix, 5*time.Second)
	w0 := locktest.Must(t)(h.AcquireWrite(ctx, "herd"))
	kinds := []string{"R1", "R2", "R3", "W4", "R5", "R6"}
	drivers := make([]*zklock.Driver, len(kinds))
	got := make([]chan *dlock.Lease, len(kinds))
	for i, k := range kinds {
		var l *dlock.Locker
		l, drivers[i] = newLocker(t, servers, prefix, 5*time.Second)
		got[i] = make(chan *dlock.Lease, 1)
		go func() {
			acquire := l.AcquireRead
			if k[0] == 'W' {
				acquire = l.AcquireWrite
			}
			lease, err := acquire(ctx, "herd")
			if err != nil {
				t.Errorf("%s: %v", k, err)
			}
			got[i] <- lease
		}()
		adm.waitNodes(dir, i+2, 5*time.Second)
	}
	eventually(t, 5*time.Second, "all waiters waiting", func() bool {
		return sum(drivers, (*zklock.Driver).Waiting) == int64(len(kinds))
	})
	// check compares each waiter's wake-ups and listings with the wanted.
	check := func(when string, wakeups, listings []int64) {
		t.Helper()
		time.Sleep(100 * time.Millisecond) // any extra wake-up would show by now
		for i, d := range drivers {
			if w := d.Wakeups(); w != wakeups[i] {
				t.Errorf("%s: %s woke %d times, want %d", when, kinds[i], w, wakeups[i])
			}
			if l := d.Listings(); l != listings[i] {
				t.Errorf("%s: %s listed the children %d times, want %d", when, kinds[i], l, listings[i])
			}
		}
	}
	take := func(i int) *dlock.Lease {
		t.Helper()
		select {
		case l := <-got[i]:
			if l == nil {
				t.FailNow()
			}
			return l
		case <-time.After(10 * time.Second):
			t.Fatalf("%s did not get the lock", kinds[i])
			return nil
		}
	}
	release := func(l *dlock.Lease) {
		t.Helper()
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	check("queued", []int64{0, 0, 0, 0, 0, 0}, []int64{1, 1, 1, 1, 1, 1})

	release(w0) // the three readers hold together
	r1, r2, r3 := take(0), take(1), take(2)
	check("W0 released", []int64{1, 1, 1, 0, 0, 0}, []int64{1, 1, 1, 1, 1, 1})

	// W4 watches R3; when R3 goes, R1 and R2 still hold: W4 looks again
	// and watches R2, then R1, whose release lets it in.
	release(r3)
	eventually(t, 5*time.Second, "W4 waiting again", func() bool { return drivers[3].Waiting() == 1 && drivers[3].Wakeups() == 1 })
	check("R3 released", []int64{1, 1, 1, 1, 0, 0}, []int64{1, 1, 1, 2, 1, 1})
	release(r2)
	eventually(t, 5*time.Second, "W4 waiting again", func() bool { return drivers[3].Waiting() == 1 && drivers[3].Wakeups() == 2 })
	check("R2 released", []int64{1, 1, 1, 2, 0, 0}, []int64{1, 1, 1, 3, 1, 1})
	release(r1)
	w4 := take(3)
	check("R1 released", []int64{1, 1, 1, 3, 0, 0}, []int64{1, 1, 1, 3, 1, 1})

	release(w4) // R5 and R6 hold together
	r5, r6 := take(4), take(5)
	check("W4 released", []int64{1, 1, 1, 3, 1, 1}, []int64{1, 1, 1, 3, 1, 1})
	if !(w0.Token() < r1.Token() && r3.Token() < w4.Token() && w4.Token() < r5.Token() && r5.Token() < r6.Token()) {
		t.Errorf("tokens do not follow the queue: W0 %d, R1 %d, R3 %d, W4 %d, R5 %d, R6 %d",
			w0.Token(), r1.Token(), r3.Token(), w4.Token(), r5.Token(), r6.Token())
	}
	release(r5)
	release(r6)
	adm.waitNodes(dir, 0, 5*time.Second)
}

// TestRWTokensIncrease takes the lock for reading and writing in turn
// from three clients: tokens strictly increase.
func TestRWTokensIncrease(t *testing.T) {
	ctx := locktest.Context(t, 60*time.Second)
	servers := []string{testenv.ZKAddr(t)}
	prefix := testPrefix()
	var lockers []*dlock.Locker
	for range 3 {
		l, _ := newLocker(t, servers, prefix, 5*time.Second)
		lockers = append(lockers, l)
	}
	var last uint64
	for i := range 60 {
		l := lockers[i%3]
		var lease *dlock.Lease
		var err error
		switch i % 4 {
		case 0:
			lease, err = l.AcquireRead(ctx, "tokens")
		case 1:
			lease, err = l.TryAcquireWrite(ctx, "tokens")
		case 2:
			lease, err = l.TryAcquireRead(ctx, "tokens")
		case 3:
			lease, err = l.AcquireWrite(ctx, "tokens")
		}
		if err != nil {
			t.Fatalf("acquisition %d: %v", i, err)
		}
		if lease.Token() <= last {
			t.Errorf("acquisition %d: token %d, not above the previous %d", i, lease.Token(), last)
		}
		last = lease.Token()
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// TestModeMismatch: Renew and Unlock act only on the owner's lock in the
// mode it was taken in.
func TestModeMismatch(t *testing.T) {
	ctx := locktest.Context(t, 30*time.Second)
	d := newDriver(t, []string{testenv.ZKAddr(t)}, testPrefix(), 5*time.Second)
	r := driver.Request{Name: "mode", Owner: "0123456789abcdef0123456789abcdef", Mode: driver.Read}
	if _, err := d.TryLock(ctx, r); err != nil {
		t.Fatal(err)
	}
	for _, m := range []driver.Mode{driver.Exclusive, driver.Write, driver.Permit, driver.Leader} {
		other := r
		other.Mode = m
		if _, err := d.Renew(ctx, other); !errors.Is(err, driver.ErrNotHeld) {
			t.Errorf("Renew in mode %v of a read lock = %v, want ErrNotHeld", m, err)
		}
		if err := d.Unlock(ctx, other); !errors.Is(err, driver.ErrNotHeld) {
			t.Errorf("Unlock in mode %v of a read lock = %v, want ErrNotHeld", m, err)
		}
	}
	if _, err := d.Renew(ctx, r); err != nil {
		t.Errorf("Renew: %v", err)
	}
	if err := d.Unlock(ctx, r); err != nil {
		t.Errorf("Unlock: %v", err)
	}
}
