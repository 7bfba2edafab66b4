package dlock_test

import (
	"context"
	"testing"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/memlock"
)

// newLocker returns a Locker over d, closed when the test ends.
func newLocker(t testing.TB, d driver.Driver, opts ...dlock.Option) *dlock.Locker {
	t.Helper()
	l, err := dlock.New(d, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// newMem returns a Locker over store, closed when the test ends.
func newMem(t testing.TB, store *memlock.Store, opts ...dlock.Option) *dlock.Locker {
	t.Helper()
	return newLocker(t, store.Driver(), opts...)
}

// mustAcquire takes the lock name, which must be free, on l.
func mustAcquire(t *testing.T, l *dlock.Locker, name string) *dlock.Lease {
	t.Helper()
	lease, err := l.Acquire(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return lease
}

// isFree reports whether the lock name is free on l: a TryAcquire (then
// released) succeeds.
func isFree(t *testing.T, l *dlock.Locker, name string) bool {
	t.Helper()
	lease, err := l.TryAcquire(context.Background(), name)
	if err != nil {
		return false
	}
	_ = lease.Release(context.Background())
	return true
}
