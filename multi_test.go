package dlock_test

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/locktest"
	"github.com/dlockgo/dlock/memlock"
)

// recorder wraps a memlock driver: it records the names it is asked to
// lock, in order, and fails the names in fail with a store error.
type recorder struct {
	*memlock.Driver
	mu    sync.Mutex
	names []string
	fail  map[string]bool
}

func (r *recorder) record(name string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.names = append(r.names, name)
	if r.fail[name] {
		return errors.New("store unreachable")
	}
	return nil
}

func (r *recorder) TryLock(ctx context.Context, req driver.Request) (driver.Grant, error) {
	if err := r.record(req.Name); err != nil {
		return driver.Grant{}, err
	}
	return r.Driver.TryLock(ctx, req)
}

func (r *recorder) Lock(ctx context.Context, req driver.Request) (driver.Grant, error) {
	if err := r.record(req.Name); err != nil {
		return driver.Grant{}, err
	}
	return r.Driver.Lock(ctx, req)
}

func TestAcquireAllCanonicalOrder(t *testing.T) {
	ctx := context.Background()
	store := memlock.NewStore()
	rec := &recorder{Driver: store.Driver()}
	l := newLocker(t, rec)
	for _, acquireAll := range []func(context.Context, []string, ...dlock.Option) (*dlock.MultiLease, error){l.AcquireAll, l.TryAcquireAll} {
		rec.names = nil
		m, err := acquireAll(ctx, []string{"c", "a", "b", "a", "c"})
		if err != nil {
			t.Fatal(err)
		}
		want := []string{"a", "b", "c"}
		if !slices.Equal(rec.names, want) {
			t.Errorf("locked %q, want %q: sorted, each once", rec.names, want)
		}
		if !slices.Equal(m.Names(), want) {
			t.Errorf("Names() = %q, want %q", m.Names(), want)
		}
		for i, p := range m.Leases() {
			if p.Name() != want[i] || m.Lease(want[i]) != p || m.Token(want[i]) != p.Token() || p.Token() == 0 {
				t.Errorf("part %d: %q token %d; Lease/Token disagree", i, p.Name(), p.Token())
			}
		}
		if m.Lease("zzz") != nil || m.Token("zzz") != 0 {
			t.Error("Lease/Token of a name outside the set is not nil/0")
		}
		if err := m.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

func TestAcquireAllChecksNamesFirst(t *testing.T) {
	ctx := context.Background()
	rec := &recorder{Driver: memlock.NewStore().Driver()}
	l := newLocker(t, rec)
	if _, err := l.AcquireAll(ctx, []string{"a", "b//c"}); !errors.Is(err, dlock.ErrInvalidName) {
		t.Errorf("AcquireAll with an invalid name = %v, want ErrInvalidName", err)
	}
	if _, err := l.TryAcquireAll(ctx, nil); err == nil {
		t.Error("TryAcquireAll of no names succeeded")
	}
	if len(rec.names) != 0 {
		t.Errorf("the driver was asked for %q before every name was checked", rec.names)
	}
}

func TestAcquireAllReleasesOnFailure(t *testing.T) {
	ctx := context.Background()
	store := memlock.NewStore()
	rec := &recorder{Driver: store.Driver(), fail: map[string]bool{"c": true}}
	l := newLocker(t, rec)
	other := newMem(t, store)
	m, err := l.AcquireAll(ctx, []string{"d", "c", "b", "a"})
	if err == nil || m != nil {
		t.Fatalf("AcquireAll with a failing part = %v, %v; want an error and no set", m, err)
	}
	if !slices.Equal(rec.names, []string{"a", "b", "c"}) {
		t.Errorf("locked %q; want a, b, then the failing c, and nothing after it", rec.names)
	}
	for _, n := range []string{"a", "b", "c", "d"} {
		if !isFree(t, other, n) {
			t.Errorf("%q is held after a failed AcquireAll", n)
		}
	}

	// A ctx that ends while AcquireAll waits for the second lock.
	holder := newMem(t, store)
	held := mustAcquire(t, holder, "y")
	wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_, err = other.AcquireAll(wctx, []string{"y", "x"})
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("AcquireAll past its deadline = %v, want DeadlineExceeded", err)
	}
	if !isFree(t, other, "x") {
		t.Error(`"x" is held after an AcquireAll that timed out`)
	}
	_ = held.Release(ctx)
}

func TestMultiLeaseEnds(t *testing.T) {
	ctx := context.Background()
	store := memlock.NewStore()
	l := newMem(t, store, dlock.WithTTL(60*time.Millisecond))

	// A part lost: Done closes, Err and the context's cause are ErrLost,
	// and stay so after Release.
	m, err := l.AcquireAll(ctx, []string{"p", "q"})
	if err != nil {
		t.Fatal(err)
	}
	work, cancel := m.Context(ctx)
	defer cancel()
	if m.Err() != nil {
		t.Fatalf("Err() of a held set = %v", m.Err())
	}
	store.Revoke("q")
	select {
	case <-m.Done():
	case <-time.After(time.Second):
		t.Fatal("Done() not closed after a part was revoked")
	}
	if !errors.Is(m.Err(), dlock.ErrLost) {
		t.Errorf("Err() = %v, want ErrLost", m.Err())
	}
	<-work.Done()
	if !errors.Is(context.Cause(work), dlock.ErrLost) {
		t.Errorf("context.Cause = %v, want ErrLost", context.Cause(work))
	}
	if err := m.Release(ctx); !errors.Is(err, dlock.ErrLost) {
		t.Errorf("Release after a loss = %v, want ErrLost among the errors", err)
	}
	if !isFree(t, l, "p") {
		t.Error(`"p" is still held after the set's Release`)
	}
	if err := m.Release(ctx); !errors.Is(err, dlock.ErrNotHeld) || !errors.Is(err, dlock.ErrLost) {
		t.Errorf("second Release = %v, want ErrNotHeld and ErrLost", err)
	}

	// A part released on its own ends the set as released.
	m, err = l.AcquireAll(ctx, []string{"p", "q"})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Lease("p").Release(ctx); err != nil {
		t.Fatal(err)
	}
	<-m.Done()
	if !errors.Is(m.Err(), dlock.ErrReleased) {
		t.Errorf("Err() after a part's Release = %v, want ErrReleased", m.Err())
	}
	if err := m.Release(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Release with a part already released = %v, want ErrNotHeld among the errors", err)
	}
	if !isFree(t, l, "q") {
		t.Error(`"q" is still held after the set's Release`)
	}

	// Renew without automatic renewal keeps the set past its TTL.
	m, err = l.AcquireAll(ctx, []string{"p", "q"}, dlock.WithAutoRenew(false))
	if err != nil {
		t.Fatal(err)
	}
	for range 4 {
		time.Sleep(30 * time.Millisecond)
		if err := m.Renew(ctx); err != nil {
			t.Fatalf("Renew: %v", err)
		}
	}
	if m.Err() != nil {
		t.Errorf("Err() of a renewed set = %v", m.Err())
	}
	if err := m.Release(ctx); err != nil {
		t.Errorf("Release: %v", err)
	}
	if !errors.Is(m.Err(), dlock.ErrReleased) {
		t.Errorf("Err() after Release = %v, want ErrReleased", m.Err())
	}
}

// TestMultiLeaseNoGoroutineLeak: sets released, lost, or left to Close,
// and their contexts, leave no goroutine behind.
func TestMultiLeaseNoGoroutineLeak(t *testing.T) {
	ctx := context.Background()
	store := memlock.NewStore()
	before := runtime.NumGoroutine()
	l, err := memlock.New(store, dlock.WithTTL(60*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		m, err := l.AcquireAll(ctx, []string{"a", "b", "c"})
		if err != nil {
			t.Fatal(err)
		}
		_, cancel := m.Context(ctx)
		switch i % 3 {
		case 0:
			_ = m.Release(ctx)
		case 1:
			store.Revoke("b")
			<-m.Done()
			_ = m.Release(ctx)
		case 2:
			_ = m.Release(ctx)
			cancel()
		}
		cancel()
	}
	// Sets still held when the Locker closes.
	if _, err := l.AcquireAll(ctx, []string{"x", "y"}); err != nil {
		t.Fatal(err)
	}
	_ = l.Close()
	locktest.NoLeak(t, before)
}
