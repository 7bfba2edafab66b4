package filelock_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/filelock"
	"github.com/dlockgo/dlock/locktest"
)

// TestFileReplacedWhileLocking: when the lock file is removed or replaced
// between open and flock, the flock is on a file the path no longer names;
// the driver must notice, drop it and lock the file the path names now —
// else two processes could each hold a lock on a different file.
func TestFileReplacedWhileLocking(t *testing.T) {
	ctx := context.Background()
	for _, how := range []string{"remove", "replace"} {
		t.Run(how, func(t *testing.T) {
			dir := t.TempDir()
			a, _ := newLocker(t, dir)
			b, _ := newLocker(t, dir)
			p := lockPath(t, dir, "x")
			fired := 0
			restore := filelock.SetLockedHook(func(path string) {
				if path == p && fired == 0 {
					fired++
					if how == "remove" {
						_ = os.Remove(path)
					} else {
						replaceFile(t, path)
					}
				}
			})
			lease, err := a.TryAcquire(ctx, "x")
			restore()
			if err != nil {
				t.Fatalf("TryAcquire with the file %sd under it: %v", how, err)
			}
			if fired != 1 {
				t.Fatalf("hook fired %d times", fired)
			}
			// The lock is on the file the path names: nobody else gets it.
			if _, err := b.TryAcquire(ctx, "x"); !errors.Is(err, dlock.ErrNotAcquired) {
				t.Errorf("TryAcquire by another = %v, want ErrNotAcquired", err)
			}
			if err := lease.Renew(ctx); err != nil {
				t.Errorf("Renew = %v, want the lock still held", err)
			}
			if err := lease.Release(ctx); err != nil {
				t.Errorf("Release = %v", err)
			}
		})
	}
}

// TestFileRemovedWhileHeld: removing or replacing a held lock file is the
// one way to lose a flock. Another client can take the new file at once,
// with a greater token; the holder's renewal (every TTL/3) notices and
// ends the lease as lost.
func TestFileRemovedWhileHeld(t *testing.T) {
	ctx := context.Background()
	const ttl = 300 * time.Millisecond
	for _, how := range []string{"remove", "replace"} {
		t.Run(how, func(t *testing.T) {
			dir := t.TempDir()
			a, da := newLocker(t, dir, dlock.WithTTL(ttl))
			b, _ := newLocker(t, dir)
			lease := mustTry(t, ctx, a, "x")
			p := lockPath(t, dir, "x")
			if how == "remove" {
				if err := os.Remove(p); err != nil {
					t.Fatal(err)
				}
			} else {
				replaceFile(t, p)
			}
			taken := time.Now()
			other := mustTry(t, ctx, b, "x")
			if other.Token() <= lease.Token() {
				t.Errorf("token of the new file's holder %d, not above %d", other.Token(), lease.Token())
			}
			select {
			case <-lease.Done():
				t.Logf("the holder learned of the loss %v after the file was %sd", time.Since(taken), how)
			case <-time.After(5 * time.Second):
				t.Fatalf("the holder did not learn of the loss within 5 s (renewals every TTL/3, %v)", ttl/3)
			}
			if !errors.Is(lease.Err(), dlock.ErrLost) {
				t.Errorf("Err() = %v, want ErrLost", lease.Err())
			}
			if da.Held() != 0 {
				t.Errorf("the driver still holds %d locks after the loss", da.Held())
			}
			if err := lease.Release(ctx); !errors.Is(err, dlock.ErrNotHeld) {
				t.Errorf("Release after the loss = %v, want ErrNotHeld", err)
			}
			if _, err := a.TryAcquire(ctx, "x"); !errors.Is(err, dlock.ErrNotAcquired) {
				t.Errorf("the new holder's lock was disturbed: TryAcquire = %v", err)
			}
			_ = other.Release(ctx)
		})
	}
}

// TestWaiterFollowsReplacedFile: a waiter kept open on a file that is then
// removed notices it and takes the new file.
func TestWaiterFollowsReplacedFile(t *testing.T) {
	ctx := locktest.Context(t, 10*time.Second)
	dir := t.TempDir()
	a, _ := newLocker(t, dir, dlock.WithTTL(time.Minute))
	b, _ := newLocker(t, dir)
	lease := mustTry(t, ctx, a, "x")
	got := make(chan error)
	go func() {
		l, err := b.Acquire(ctx, "x")
		if err == nil {
			err = l.Release(ctx)
		}
		got <- err
	}()
	if !settle(5*time.Second, func() bool { return filelock.Waiters() == 1 }) {
		t.Fatal("the waiter never registered")
	}
	if err := os.Remove(lockPath(t, dir, "x")); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	t.Logf("the waiter took the new file %v after the removal", time.Since(start))
	_ = lease.Release(ctx)
}
