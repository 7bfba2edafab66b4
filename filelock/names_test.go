package filelock_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/filelock"
)

func TestFileName(t *testing.T) {
	for _, c := range []struct{ name, file string }{
		{"a", "a.lock"},
		{"orders/42", "orders%42.lock"},
		{"a/b/c", "a%b%c.lock"},
		{"a.lock", "a.lock.lock"},
		{"a.lock/b", "a.lock%b.lock"},
		{"...", "....lock"},
		{"..a/b..", "..a%b...lock"},
		{"A.b-c_d:e@f+g=h", "A.b-c_d:e@f+g=h.lock"},
	} {
		got, err := filelock.FileName(c.name)
		if err != nil || got != c.file {
			t.Errorf("FileName(%q) = %q, %v; want %q", c.name, got, err, c.file)
			continue
		}
		if back, ok := filelock.LockName(got); !ok || back != c.name {
			t.Errorf("LockName(%q) = %q, %v; want %q", got, back, ok, c.name)
		}
	}
	for _, f := range []string{"a", "a.lck", ".lock", "%a.lock", "a%.lock", "a%%b.lock", "a/b.lock", "%2e%2e.lock", "..lock", "a b.lock"} {
		if name, ok := filelock.LockName(f); ok {
			t.Errorf("LockName(%q) = %q, true; want false", f, name)
		}
	}
}

// TestNoPathTraversal: names that could climb out of the directory are
// rejected before any file is touched, and valid names with dots stay flat
// in it.
func TestNoPathTraversal(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	dir := filepath.Join(root, "locks")
	l, d := newLocker(t, dir)
	bad := []string{"../x", "/", "a/../../etc", "..", ".", "/etc/passwd", "a/./b", "a/..", "../../../../tmp/x",
		"a\\..\\b", "a%2F..%2Fb", "%", "a%b", "a\x00b", "x/../../" + filepath.Base(root) + "/escape"}
	for _, n := range bad {
		if lease, err := l.TryAcquire(ctx, n); !errors.Is(err, dlock.ErrInvalidName) {
			t.Errorf("TryAcquire(%q) = %v, want ErrInvalidName", n, err)
			if lease != nil {
				_ = lease.Release(ctx)
			}
		}
		if _, err := d.Path(n); !errors.Is(err, dlock.ErrInvalidName) {
			t.Errorf("Path(%q) = %v, want ErrInvalidName", n, err)
		}
		if _, err := filelock.FileName(n); !errors.Is(err, dlock.ErrInvalidName) {
			t.Errorf("FileName(%q) = %v, want ErrInvalidName", n, err)
		}
	}
	good := []string{"...", "..a", "a..", "a/.b", "a/..b/c", ".x", "x/y/z"}
	for _, n := range good {
		lease := mustTry(t, ctx, l, n)
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// The whole tree under root: the lock directory, and in it one flat
	// file per good name, nothing else.
	want := map[string]bool{}
	for _, n := range good {
		f, _ := filelock.FileName(n)
		want[filepath.Join(dir, f)] = true
	}
	err := filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		switch {
		case p == root || p == dir:
		case want[p] && e.Type().IsRegular():
			delete(want, p)
		default:
			t.Errorf("unexpected %s (%v) under the test directory", p, e.Type())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for p := range want {
		t.Errorf("missing lock file %s", p)
	}
}

// TestSymlinkRefused: a lock file planted as a symbolic link is never
// followed, so the driver never writes through it.
func TestSymlinkRefused(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, []byte("precious"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, lockPath(t, dir, "x")); err != nil {
		t.Fatal(err)
	}
	l, _ := newLocker(t, dir)
	if lease, err := l.TryAcquire(ctx, "x"); err == nil {
		_ = lease.Release(ctx)
		t.Error("TryAcquire through a symbolic link succeeded")
	} else if !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("TryAcquire through a symbolic link = %v, want an error saying so", err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "precious" {
		t.Errorf("the link's target now holds %q", b)
	}
}

func FuzzFileName(f *testing.F) {
	for _, s := range []string{"a", "a/b", "../x", "a%b", "a/../b", "...", "a.lock", "/", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		file, err := filelock.FileName(name)
		if dlock.ValidateName(name) != nil || strings.Contains(name, "%") {
			if err == nil {
				t.Fatalf("FileName(%q) = %q, want an error", name, file)
			}
			return
		}
		if err != nil {
			t.Fatalf("FileName(%q): %v", name, err)
		}
		if strings.ContainsAny(file, "/\x00") || file == "." || file == ".." || !strings.HasSuffix(file, filelock.Suffix) || len(file) > 255 {
			t.Fatalf("FileName(%q) = %q: not a safe file name", name, file)
		}
		if back, ok := filelock.LockName(file); !ok || back != name {
			t.Fatalf("LockName(FileName(%q) = %q) = %q, %v", name, file, back, ok)
		}
	})
}
