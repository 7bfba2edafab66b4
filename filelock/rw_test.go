package filelock_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/filelock"
	"github.com/dlockgo/dlock/locktest"
)

func releaseAll(t *testing.T, ctx context.Context, leases ...*dlock.Lease) {
	t.Helper()
	for _, l := range leases {
		if err := l.Release(ctx); err != nil {
			t.Errorf("Release(%q, %v): %v", l.Name(), l.Mode(), err)
		}
	}
}

func TestSupports(t *testing.T) {
	l, _ := newLocker(t, t.TempDir())
	for m, want := range map[driver.Mode]bool{driver.Exclusive: true, driver.Read: true, driver.Write: true, driver.Permit: false, driver.Leader: false} {
		if got := l.Supports(m); got != want {
			t.Errorf("Supports(%v) = %v, want %v", m, got, want)
		}
	}
	if _, err := l.TryAcquirePermit(context.Background(), "x", 2); !errors.Is(err, dlock.ErrUnsupported) {
		t.Errorf("TryAcquirePermit = %v, want ErrUnsupported", err)
	}
}

// TestRWFiles: the readers-writer lock "x" is not the mutex "x", and its
// files are no mutex's.
func TestRWFiles(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	l, _ := newLocker(t, dir)
	m := mustTry(t, ctx, l, "a/b")
	w := locktest.Must(t)(l.TryAcquireWrite(ctx, "a/b"))
	for _, suffix := range []string{filelock.RWSuffix, filelock.GateSuffix, filelock.SeqSuffix} {
		f := "a%b" + suffix
		if _, err := os.Stat(filepath.Join(dir, f)); suffix != filelock.GateSuffix && err != nil {
			t.Errorf("%s: %v", f, err)
		}
		if name, ok := filelock.LockName(f); ok {
			t.Errorf("LockName(%q) = %q: a readers-writer file reads as a mutex's", f, name)
		}
	}
	releaseAll(t, ctx, m, w)
}

// TestFileReadersOverlap: readers hold together with distinct increasing
// tokens, and exclude a writer, which excludes them.
func TestFileReadersOverlap(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	a, _ := newLocker(t, dir)
	b, _ := newLocker(t, dir)
	r1 := locktest.Must(t)(a.TryAcquireRead(ctx, "rw"))
	r2 := locktest.Must(t)(b.TryAcquireRead(ctx, "rw"))
	if r2.Token() <= r1.Token() {
		t.Errorf("reader tokens %d then %d", r1.Token(), r2.Token())
	}
	if _, err := b.TryAcquireWrite(ctx, "rw"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("TryAcquireWrite with readers in = %v", err)
	}
	releaseAll(t, ctx, r1, r2)
	w := locktest.Must(t)(a.TryAcquireWrite(ctx, "rw"))
	if w.Token() <= r2.Token() {
		t.Errorf("writer token %d after %d", w.Token(), r2.Token())
	}
	if _, err := b.TryAcquireRead(ctx, "rw"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("TryAcquireRead with a writer in = %v", err)
	}
	if err := w.Renew(ctx); err != nil {
		t.Error(err)
	}
	releaseAll(t, ctx, w)
}

// TestFileWriterPreference: a writer waiting behind a reader blocks later
// readers and gets the lock first.
func TestFileWriterPreference(t *testing.T) {
	ctx := locktest.Context(t, 20*time.Second)
	dir := t.TempDir()
	a, _ := newLocker(t, dir)
	b, _ := newLocker(t, dir)
	c, _ := newLocker(t, dir)
	r1 := locktest.Must(t)(a.AcquireRead(ctx, "rw"))
	var mu sync.Mutex
	var order []string
	note := func(s string) { mu.Lock(); order = append(order, s); mu.Unlock() }
	wc := acquireAsync(t, func() (*dlock.Lease, error) {
		defer note("writer")
		return b.AcquireWrite(ctx, "rw")
	})
	// Wait until the writer is in the gate: a reader's try fails.
	if !settle(5*time.Second, func() bool {
		r, err := c.TryAcquireRead(ctx, "rw")
		if err == nil {
			_ = r.Release(ctx)
		}
		return err != nil
	}) {
		t.Fatal("readers still get in while a writer waits")
	}
	rc := acquireAsync(t, func() (*dlock.Lease, error) {
		defer note("reader2")
		return c.AcquireRead(ctx, "rw")
	})
	time.Sleep(100 * time.Millisecond)
	mu.Lock()
	if len(order) != 0 {
		t.Errorf("%v got in while the first reader held the lock", order)
	}
	mu.Unlock()
	releaseAll(t, ctx, r1)
	w := <-wc
	time.Sleep(50 * time.Millisecond)
	mu.Lock()
	if len(order) != 1 || order[0] != "writer" {
		t.Errorf("after the first reader left: %v, want [writer]", order)
	}
	mu.Unlock()
	releaseAll(t, ctx, w)
	r2 := <-rc
	if r2.Token() <= w.Token() {
		t.Errorf("reader token %d after the writer's %d", r2.Token(), w.Token())
	}
	releaseAll(t, ctx, r2)
}

// TestFileRWCancel: a cancelled writer's wait ends with its context (the
// backstop is 30 s, so a return within 5 s is the context's doing) and
// leaves the gate open, and a cancelled reader's leaves nothing.
func TestFileRWCancel(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	defer filelock.SetBackstop(30 * time.Second)()
	a, _ := newLocker(t, dir)
	b, _ := newLocker(t, dir)
	r := locktest.Must(t)(a.TryAcquireRead(ctx, "rw"))
	wctx, wcancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer wcancel()
	start := time.Now()
	if _, err := b.AcquireWrite(wctx, "rw"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("AcquireWrite = %v, want DeadlineExceeded", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the wait ended %v after its 100ms deadline's start: not by the deadline, with a backstop of 30 s", took)
	}
	r2 := locktest.Must(t)(b.TryAcquireRead(ctx, "rw")) // the gate is open again
	releaseAll(t, ctx, r, r2)
	w := locktest.Must(t)(a.TryAcquireWrite(ctx, "rw"))
	rctx, rcancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer rcancel()
	if _, err := b.AcquireRead(rctx, "rw"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("AcquireRead = %v, want DeadlineExceeded", err)
	}
	releaseAll(t, ctx, w)
	w2 := locktest.Must(t)(b.TryAcquireWrite(ctx, "rw"))
	releaseAll(t, ctx, w2)
	if n := filelock.Waiters(); n != 0 {
		t.Errorf("%d waiters left registered", n)
	}
}

// TestFileRWCrash: a crashed reader's share goes with its files.
func TestFileRWCrash(t *testing.T) {
	ctx := locktest.Context(t, 10*time.Second)
	dir := t.TempDir()
	a, da := newLocker(t, dir)
	b, _ := newLocker(t, dir)
	locktest.Must(t)(a.TryAcquireRead(ctx, "rw"))
	got := acquireAsync(t, func() (*dlock.Lease, error) { return b.AcquireWrite(ctx, "rw") })
	time.Sleep(50 * time.Millisecond)
	da.Crash()
	select {
	case w := <-got:
		releaseAll(t, ctx, w)
	case <-time.After(5 * time.Second):
		t.Fatal("the crashed reader's lock did not free the writer")
	}
}

// TestFileRWMutualExclusion: writers alone, readers together, under
// contention from several drivers.
func TestFileRWMutualExclusion(t *testing.T) {
	ctx := locktest.Context(t, 60*time.Second)
	dir := t.TempDir()
	var readers, writers, maxReaders atomic.Int32
	var wg sync.WaitGroup
	for i := range 8 {
		l, _ := newLocker(t, dir)
		wg.Go(func() {
			for j := range 20 {
				write := (i+j)%4 == 0
				var lease *dlock.Lease
				var err error
				if write {
					lease, err = l.AcquireWrite(ctx, "mx")
				} else {
					lease, err = l.AcquireRead(ctx, "mx")
				}
				if err != nil {
					t.Error(err)
					return
				}
				if write {
					if writers.Add(1) != 1 || readers.Load() != 0 {
						t.Error("a writer with company")
					}
				} else {
					n := readers.Add(1)
					for {
						old := maxReaders.Load()
						if n <= old || maxReaders.CompareAndSwap(old, n) {
							break
						}
					}
					if writers.Load() != 0 {
						t.Error("a reader with a writer")
					}
				}
				time.Sleep(time.Millisecond)
				if write {
					writers.Add(-1)
				} else {
					readers.Add(-1)
				}
				if err := lease.Release(ctx); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	// Whether readers happened to overlap here is the scheduler's choice;
	// that they may is checked by construction in TestFileRWCancel.
	t.Logf("at most %d readers together", maxReaders.Load())
}

// TestProcessWriterPreference: a writer waiting in another process shuts
// out this process's new readers; killed while it waits, it shuts out
// nobody; a second one gets the lock when the reader leaves, before a
// reader that came after it.
func TestProcessWriterPreference(t *testing.T) {
	ctx := locktest.Context(t, 60*time.Second)
	dir := t.TempDir()
	l, _ := newLocker(t, dir)
	r := locktest.Must(t)(l.AcquireRead(ctx, "rw"))
	readerOut := func() bool {
		lease, err := l.TryAcquireRead(ctx, "rw")
		if err == nil {
			_ = lease.Release(ctx)
		}
		return err != nil
	}

	w1 := startHelper(t, "write", dir, "rw")
	w1.next(t, "ready", 30*time.Second)
	if !settle(10*time.Second, readerOut) {
		t.Fatal("a waiting writer in another process does not shut out new readers")
	}
	if err := w1.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = w1.cmd.Wait()
	if readerOut() {
		t.Fatal("a writer killed while waiting still shuts out readers")
	}

	w2 := startHelper(t, "write", dir, "rw")
	w2.next(t, "ready", 30*time.Second)
	if !settle(10*time.Second, readerOut) {
		t.Fatal("the second writer does not shut out new readers")
	}
	got := acquireAsync(t, func() (*dlock.Lease, error) { return l.AcquireRead(ctx, "rw") })
	time.Sleep(50 * time.Millisecond)
	releaseAll(t, ctx, r)
	tok := parseUint(t, w2.next(t, "token", 10*time.Second)[1])
	select {
	case lease := <-got:
		t.Fatalf("a reader got in (token %d) while the writer held the lock", lease.Token())
	case <-time.After(100 * time.Millisecond):
	}
	if err := w2.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case lease := <-got:
		if lease.Token() <= tok {
			t.Errorf("reader token %d after the writer's %d", lease.Token(), tok)
		}
		releaseAll(t, ctx, lease)
	case <-time.After(10 * time.Second):
		t.Fatal("the reader did not get in after the writer died")
	}
}
