package filelock_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/filelock"
	"github.com/dlockgo/dlock/locktest"
)

// harness runs the suite on a fresh directory. TakeAway alternately
// removes the lock file and replaces it with a new one.
func harness(t *testing.T) locktest.Harness {
	dir := t.TempDir()
	var takes atomic.Int32
	return locktest.Harness{
		NewLocker: func(t *testing.T, opts ...dlock.Option) *dlock.Locker {
			l, err := filelock.New(dir, nil, opts...)
			if err != nil {
				t.Fatal(err)
			}
			return l
		},
		TakeAway: func(t *testing.T, name string) {
			p := lockPath(t, dir, name)
			if takes.Add(1)%2 == 1 {
				if err := os.Remove(p); err != nil {
					t.Fatal(err)
				}
				return
			}
			replaceFile(t, p)
		},
	}
}

// TestConformance runs the suite with the Locker's TTL path: with renewal
// off, the Locker ends the lease at its TTL and the driver drops the flock.
func TestConformance(t *testing.T) {
	locktest.Run(t, harness(t))
}

// TestConformanceCrash runs the suite with the crash path for
// ExpiresWithoutRenewal: the holder's files are closed without unlocking,
// as when its process dies.
func TestConformanceCrash(t *testing.T) {
	h := harness(t)
	h.Crash = func(t *testing.T, l *dlock.Locker) { l.Driver().(*filelock.Driver).Crash() }
	locktest.Run(t, h)
}

func TestOpen(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	a, err := dlock.Open(ctx, "file://"+dir+"?ttl=5s&mode=0640&sync=true")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := dlock.Open(ctx, "file://localhost"+dir)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	lease := mustTry(t, ctx, a, "jobs/nightly")
	if lease.TTL() != 5*time.Second {
		t.Errorf("TTL from the URL = %v, want 5s", lease.TTL())
	}
	if _, err := b.TryAcquire(ctx, "jobs/nightly"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("second Locker on the same directory: TryAcquire = %v, want ErrNotAcquired", err)
	}
	fi, err := os.Stat(filepath.Join(dir, "jobs%nightly.lock"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o640 {
		t.Errorf("lock file mode = %v, want 0640 from mode=0640", fi.Mode().Perm())
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}

	for _, bad := range []struct{ url, param string }{
		{"file://" + dir + "?colour=red", "colour"},
		{"file://" + dir + "?mode=abc", "mode"},
		{"file://" + dir + "?mode=0400", "mode"},
		{"file://" + dir + "?mode=01777", "mode"},
		{"file://" + dir + "?mode=", "mode"},
		{"file://" + dir + "?sync=maybe", "sync"},
		{"file://" + dir + "?ttl=soon", "ttl"},
		{"file://var/lock/app", "host"},
		{"file:relative/dir", "path"},
		{"file:///", "path"},
		{"file://me@" + dir, "user"},
	} {
		locktest.OpenFails(t, ctx, bad.url, bad.param)
	}
}

// TestOpenDefaultDir: "file://" is the default directory.
func TestOpenDefaultDir(t *testing.T) {
	state := t.TempDir()
	t.Setenv("XDG_STATE_HOME", state)
	for _, u := range []string{"file://", "file:", "file://localhost"} {
		l, err := dlock.Open(context.Background(), u)
		if err != nil {
			t.Fatalf("Open(%q): %v", u, err)
		}
		if got, want := l.Driver().(*filelock.Driver).Dir(), filepath.Join(state, "dlock"); got != want {
			t.Errorf("Open(%q): Dir() = %q, want %q", u, got, want)
		}
		_ = l.Close()
	}
}

func TestDefaultDir(t *testing.T) {
	state, home := t.TempDir(), t.TempDir()
	t.Setenv("XDG_STATE_HOME", state)
	t.Setenv("HOME", home)
	dir, err := filelock.DefaultDir()
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(state, "dlock"); dir != want {
		t.Errorf("DefaultDir() = %q, want %q", dir, want)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 || !fi.IsDir() {
		t.Errorf("DefaultDir() made %v (%v), want a directory with mode 0700", fi.Mode(), err)
	}

	// A relative XDG_STATE_HOME is ignored, as the XDG spec says.
	t.Setenv("XDG_STATE_HOME", "relative/state")
	if dir, err = filelock.DefaultDir(); err != nil || dir != filepath.Join(home, ".local", "state", "dlock") {
		t.Errorf("DefaultDir() with a relative XDG_STATE_HOME = %q, %v; want it under HOME", dir, err)
	}

	// A directory others can write, or a symbolic link, is refused.
	open := filepath.Join(t.TempDir(), "open")
	if err := os.MkdirAll(filepath.Join(open, "dlock"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(open, "dlock"), 0o777); err != nil {
		t.Fatal(err)
	}
	t.Setenv("XDG_STATE_HOME", open)
	if _, err := filelock.DefaultDir(); err == nil {
		t.Error("DefaultDir() accepted a world-writable directory")
	}
	link := t.TempDir()
	if err := os.Symlink(t.TempDir(), filepath.Join(link, "dlock")); err != nil {
		t.Fatal(err)
	}
	t.Setenv("XDG_STATE_HOME", link)
	if _, err := filelock.DefaultDir(); err == nil {
		t.Error("DefaultDir() accepted a symbolic link")
	}
}

func TestNewDriver(t *testing.T) {
	// A missing directory is created; a file is no directory.
	dir := filepath.Join(t.TempDir(), "a", "b")
	d, err := filelock.NewDriver(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if d.Dir() != dir || d.Scheme() != "file" {
		t.Errorf("Dir() = %q, Scheme() = %q", d.Dir(), d.Scheme())
	}
	_ = d.Close()
	f := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(f, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := filelock.NewDriver(f, nil); err == nil {
		t.Error("NewDriver accepted a regular file as its directory")
	}
	for _, m := range []os.FileMode{0o400, 0o200, 0o1600, os.ModeDir | 0o700} {
		if _, err := filelock.NewDriver(t.TempDir(), &filelock.Options{Mode: m}); err == nil {
			t.Errorf("NewDriver accepted mode %v", m)
		}
	}
	// A directory reached through a symbolic link is the same directory.
	real := t.TempDir()
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	d, err = filelock.NewDriver(link, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := filepath.EvalSymlinks(real); d.Dir() != got {
		t.Errorf("Dir() through a link = %q, want %q", d.Dir(), got)
	}
	_ = d.Close()
}

// TestLockFile: the file holds the token as text, is created with the
// mode asked whatever the umask, and stays after release.
func TestLockFile(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	l, err := filelock.New(dir, &filelock.Options{Mode: 0o660, Sync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	lease := mustTry(t, ctx, l, "a/b")
	p := lockPath(t, dir, "a/b")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if want := []byte("00000000000000000000\n"); len(b) != len(want) {
		t.Errorf("lock file holds %q, want 21 bytes", b)
	}
	tok := lease.Token()
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatalf("lock file gone after release: %v", err)
	}
	if fi.Mode().Perm() != 0o660 {
		t.Errorf("mode = %v, want 0660", fi.Mode().Perm())
	}
	b, _ = os.ReadFile(p)
	if string(b) != fmtToken(tok) {
		t.Errorf("lock file holds %q, want the token %d", b, tok)
	}
	// A file with garbage in it still works, and tokens still increase.
	if err := os.WriteFile(p, []byte("garbage"), 0o660); err != nil {
		t.Fatal(err)
	}
	lease = mustTry(t, ctx, l, "a/b")
	if lease.Token() <= tok {
		t.Errorf("token after garbage %d, not above %d", lease.Token(), tok)
	}
	_ = lease.Release(ctx)
}

func fmtToken(t uint64) string {
	b := []byte("00000000000000000000\n")
	for i := 19; i >= 0; i-- {
		b[i] = byte('0' + t%10)
		t /= 10
	}
	return string(b)
}
