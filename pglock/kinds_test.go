package pglock_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/pglock"
)

func rwKey(name string) int64 { return pglock.ModeKey(table, driver.Write, name, 0) }

// TestKeysOfEachKind: the mutex, readers-writer lock, semaphore and
// election called name are four locks.
func TestKeysOfEachKind(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l := newLocker(t, pglock.Options{})
	name := "kinds/" + randomHex(4)
	keys := map[int64]string{}
	for _, k := range []struct {
		what string
		key  int64
	}{
		{"mutex", pglock.Key(table, name)},
		{"rw", rwKey(name)},
		{"slot 0", pglock.ModeKey(table, driver.Permit, name, 0)},
		{"slot 1", pglock.ModeKey(table, driver.Permit, name, 1)},
		{"leader", pglock.ModeKey(table, driver.Leader, name, 0)},
	} {
		if other, dup := keys[k.key]; dup {
			t.Errorf("%s and %s share key %d", k.what, other, k.key)
		}
		keys[k.key] = k.what
	}
	if pglock.ModeKey(table, driver.Read, name, 0) != rwKey(name) {
		t.Error("Read and Write have different keys")
	}
	mu := mustLease(t)(l.TryAcquire(ctx, name))
	w := mustLease(t)(l.TryAcquireWrite(ctx, name))
	p := mustLease(t)(l.TryAcquirePermit(ctx, name, 1))
	e := mustLease(t)(l.Campaign(ctx, name, "me"))
	for _, lease := range []*dlock.Lease{mu, w, p, e} {
		if err := lease.Release(ctx); err != nil {
			t.Error(err)
		}
	}
}

func mustLease(t *testing.T) func(*dlock.Lease, error) *dlock.Lease {
	return func(l *dlock.Lease, err error) *dlock.Lease {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
}

// TestReadersOverlap: readers hold together, with distinct increasing
// tokens; a writer excludes them and they exclude it.
func TestReadersOverlap(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a, b := newLocker(t, pglock.Options{}), newLocker(t, pglock.Options{})
	name := "rw/overlap/" + randomHex(4)
	r1 := mustLease(t)(a.TryAcquireRead(ctx, name))
	r2 := mustLease(t)(b.TryAcquireRead(ctx, name))
	if r2.Token() <= r1.Token() {
		t.Errorf("reader tokens %d then %d: want increasing", r1.Token(), r2.Token())
	}
	adm := newAdmin(t)
	if h, _ := adm.keyRows(t, rwKey(name)); len(h) != 2 {
		t.Errorf("pg_locks shows %d holders, want 2 readers", len(h))
	}
	if _, err := b.TryAcquireWrite(ctx, name); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("TryAcquireWrite with readers in = %v, want ErrNotAcquired", err)
	}
	release(t, ctx, r1, r2)
	w := mustLease(t)(a.TryAcquireWrite(ctx, name))
	if w.Token() <= r2.Token() {
		t.Errorf("writer token %d after reader's %d", w.Token(), r2.Token())
	}
	if _, err := b.TryAcquireRead(ctx, name); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("TryAcquireRead with a writer in = %v, want ErrNotAcquired", err)
	}
	// Refresh checks the lock in its own mode.
	if err := w.Refresh(ctx); err != nil {
		t.Errorf("Refresh of the writer: %v", err)
	}
	release(t, ctx, w)
}

func release(t *testing.T, ctx context.Context, leases ...*dlock.Lease) {
	t.Helper()
	for _, l := range leases {
		if err := l.Release(ctx); err != nil {
			t.Errorf("Release(%q, %v): %v", l.Name(), l.Mode(), err)
		}
	}
}

// TestWriterPreference: a writer waiting behind a reader blocks the
// readers that come after it, on the server (PostgreSQL's lock queue), and
// is served before them.
func TestWriterPreference(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, b, c := newLocker(t, pglock.Options{}), newLocker(t, pglock.Options{}), newLocker(t, pglock.Options{})
	adm := newAdmin(t)
	name := "rw/pref/" + randomHex(4)
	r1 := mustLease(t)(a.AcquireRead(ctx, name))

	var order []string
	var mu sync.Mutex
	note := func(s string) { mu.Lock(); order = append(order, s); mu.Unlock() }
	wDone := make(chan *dlock.Lease, 1)
	go func() {
		w, err := b.AcquireWrite(ctx, name)
		if err != nil {
			t.Error(err)
		}
		note("writer")
		wDone <- w
	}()
	if !waitUntil(5*time.Second, func() bool { _, n := adm.keyRows(t, rwKey(name)); return n == 1 }) {
		t.Fatal("the writer is not queued")
	}
	// A reader arriving now cannot get in, neither by try nor by waiting.
	if _, err := c.TryAcquireRead(ctx, name); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryAcquireRead behind a waiting writer = %v, want ErrNotAcquired", err)
	}
	rDone := make(chan *dlock.Lease, 1)
	go func() {
		r, err := c.AcquireRead(ctx, name)
		if err != nil {
			t.Error(err)
		}
		note("reader2")
		rDone <- r
	}()
	if !waitUntil(5*time.Second, func() bool { _, n := adm.keyRows(t, rwKey(name)); return n == 2 }) {
		t.Fatal("the second reader is not queued")
	}
	time.Sleep(100 * time.Millisecond)
	mu.Lock()
	if len(order) != 0 {
		t.Errorf("%v got in while the first reader held the lock", order)
	}
	mu.Unlock()
	release(t, ctx, r1)
	w := <-wDone
	time.Sleep(100 * time.Millisecond)
	mu.Lock()
	if len(order) != 1 || order[0] != "writer" {
		t.Errorf("after the first reader left: %v, want [writer] alone", order)
	}
	mu.Unlock()
	release(t, ctx, w)
	r2 := <-rDone
	if r2.Token() <= w.Token() {
		t.Errorf("reader token %d after the writer's %d", r2.Token(), w.Token())
	}
	release(t, ctx, r2)
}

// TestConsecutiveReadersTogether: readers queued behind a writer are
// admitted together when it leaves. Each reader has a driver of its own,
// as processes would: a driver queues one reader per lock on the server.
func TestConsecutiveReadersTogether(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l := newLocker(t, pglock.Options{MaxIdle: 8})
	adm := newAdmin(t)
	name := "rw/together/" + randomHex(4)
	w := mustLease(t)(l.AcquireWrite(ctx, name))
	const readers = 4
	var in atomic.Int32
	var wg sync.WaitGroup
	leases := make(chan *dlock.Lease, readers)
	for range readers {
		rl := newLocker(t, pglock.Options{})
		wg.Go(func() {
			r, err := rl.AcquireRead(ctx, name)
			if err != nil {
				t.Error(err)
				return
			}
			in.Add(1)
			leases <- r
		})
	}
	if !waitUntil(5*time.Second, func() bool { _, n := adm.keyRows(t, rwKey(name)); return n == readers }) {
		t.Fatal("the readers are not queued")
	}
	release(t, ctx, w)
	if !waitUntil(5*time.Second, func() bool { return in.Load() == readers }) {
		t.Fatalf("%d of %d readers got in while none released", in.Load(), readers)
	}
	wg.Wait()
	close(leases)
	for r := range leases {
		release(t, ctx, r)
	}
}

// TestCancelledServerWaits: a wait on the server (writer, reader, permit,
// candidate) whose context ends returns promptly and leaves nothing
// queued or held.
func TestCancelledServerWaits(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a, b := newLocker(t, pglock.Options{}), newLocker(t, pglock.Options{})
	adm := newAdmin(t)
	name := "cancel/" + randomHex(4)
	for _, c := range []struct {
		what string
		hold func() (*dlock.Lease, error)
		wait func(context.Context) (*dlock.Lease, error)
		keys []int64
	}{
		{"write", func() (*dlock.Lease, error) { return a.AcquireRead(ctx, name) },
			func(ctx context.Context) (*dlock.Lease, error) { return b.AcquireWrite(ctx, name) }, []int64{rwKey(name)}},
		{"read", func() (*dlock.Lease, error) { return a.AcquireWrite(ctx, name) },
			func(ctx context.Context) (*dlock.Lease, error) { return b.AcquireRead(ctx, name) }, []int64{rwKey(name)}},
		{"permit", func() (*dlock.Lease, error) { return a.AcquirePermit(ctx, name, 1) },
			func(ctx context.Context) (*dlock.Lease, error) { return b.AcquirePermit(ctx, name, 1) },
			[]int64{pglock.ModeKey(table, driver.Permit, name, 0)}},
		{"leader", func() (*dlock.Lease, error) { return a.Campaign(ctx, name, "a") },
			func(ctx context.Context) (*dlock.Lease, error) { return b.Campaign(ctx, name, "b") },
			[]int64{pglock.ModeKey(table, driver.Leader, name, 0)}},
	} {
		t.Run(c.what, func(t *testing.T) {
			h := mustLease(t)(c.hold())
			wctx, wcancel := context.WithCancel(ctx)
			errc := make(chan error, 1)
			go func() {
				l, err := c.wait(wctx)
				if err == nil {
					_ = l.Release(ctx)
				}
				errc <- err
			}()
			if !waitUntil(5*time.Second, func() bool { _, n := adm.keyRows(t, c.keys[0]); return n == 1 }) {
				t.Fatal("the waiter is not queued on the server")
			}
			start := time.Now()
			wcancel()
			err := <-errc
			if took := time.Since(start); took > time.Second {
				t.Errorf("the cancelled wait returned after %v", took)
			}
			if !errors.Is(err, context.Canceled) {
				t.Errorf("cancelled wait = %v, want context.Canceled", err)
			}
			for _, k := range c.keys {
				if holders, waiting := adm.keyRows(t, k); len(holders) != 1 || waiting != 0 {
					t.Errorf("after the cancel: %d holders, %d waiting; want the 1 holder alone", len(holders), waiting)
				}
			}
			release(t, ctx, h)
		})
	}
}
