package filelock_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/filelock"
	"github.com/dlockgo/dlock/locktest"
)

// newLocker returns a Locker over a new Driver for dir, closed when t ends.
func newLocker(t testing.TB, dir string, opts ...dlock.Option) (*dlock.Locker, *filelock.Driver) {
	t.Helper()
	l := locktest.Opened(t)(filelock.New(dir, nil, opts...))
	return l, l.Driver().(*filelock.Driver)
}

// lockPath returns the lock file of name in dir.
func lockPath(t testing.TB, dir, name string) string {
	t.Helper()
	f, err := filelock.FileName(name)
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, f)
}

// replaceFile puts a new file in place of path in one rename, as an editor
// or a careless script would.
func replaceFile(t testing.TB, path string) {
	t.Helper()
	tmp := path + ".new"
	if err := os.WriteFile(tmp, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// openFDs counts this process's open file descriptors, or returns -1
// where /proc is missing.
func openFDs() int {
	es, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return len(es)
}

// settle waits up to limit for cond.
var settle = locktest.Eventually

func mustTry(t testing.TB, ctx context.Context, l *dlock.Locker, name string) *dlock.Lease {
	t.Helper()
	lease, err := l.TryAcquire(ctx, name)
	if err != nil {
		t.Fatalf("TryAcquire(%q): %v", name, err)
	}
	return lease
}

// acquireAsync runs acquire in a goroutine, failing t if it fails, and
// delivers the lease on the channel it returns.
func acquireAsync(t testing.TB, acquire func() (*dlock.Lease, error)) <-chan *dlock.Lease {
	got := make(chan *dlock.Lease, 1)
	go func() {
		lease, err := acquire()
		if err != nil {
			t.Error(err)
		}
		got <- lease
	}()
	return got
}
