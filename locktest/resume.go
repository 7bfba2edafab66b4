package locktest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
)

// resumeByHandle: on a backend whose locks outlive their process
// (driver.Resumer), a lease detached by one client and resumed from its
// handle's text by another keeps its token and excludes a third client
// until the resumed lease's release; a handle whose lock expired and
// passed to another owner is refused with ErrNotHeld, and the new owner's
// lock is untouched. Elsewhere Detach and Resume report ErrUnsupported.
func (s *suite) resumeByHandle(t *testing.T, ctx context.Context, name string) {
	a, b, c := s.locker(t), s.locker(t), s.locker(t)
	lease := acquire(t, ctx, a, name)
	if _, ok := a.Driver().(driver.Resumer); !ok {
		if _, err := lease.Detach(); !errors.Is(err, dlock.ErrUnsupported) {
			t.Errorf("Detach on a backend without Resume = %v, want ErrUnsupported", err)
		}
		if err := lease.Err(); err != nil {
			t.Errorf("the lease after a refused Detach: %v, want it still held", err)
		}
		h := dlock.Handle{Name: name, Owner: lease.Owner(), Token: lease.Token(), TTL: lease.TTL()}
		if _, err := b.Resume(ctx, h); !errors.Is(err, dlock.ErrUnsupported) {
			t.Errorf("Resume on a backend without it = %v, want ErrUnsupported", err)
		}
		release(t, ctx, lease)
		return
	}
	h, err := lease.Detach()
	if err != nil {
		t.Fatalf("Detach: %v", err)
	}
	if err := lease.Err(); !errors.Is(err, dlock.ErrDetached) {
		t.Errorf("Err after Detach = %v, want ErrDetached", err)
	}
	if err := lease.Release(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Release after Detach = %v, want ErrNotHeld", err)
	}
	mustBeHeld(t, ctx, c, name, "after Detach")
	parsed, err := dlock.ParseHandle(h.String())
	if err != nil || parsed != h {
		t.Fatalf("ParseHandle(%q) = %+v, %v; want %+v", h.String(), parsed, err, h)
	}
	resumed, err := resumeDecided(ctx, b, parsed)
	if err != nil {
		t.Fatalf("Resume: %v", err)
	}
	if resumed.Token() != h.Token || resumed.Owner() != h.Owner {
		t.Errorf("resumed token %d owner %q, want %d %q", resumed.Token(), resumed.Owner(), h.Token, h.Owner)
	}
	// Renewed here: held well past its TTL.
	time.Sleep(s.h.TTL * 3 / 2)
	if err := resumed.Err(); err != nil {
		t.Fatalf("the resumed lease after 1.5 TTL: %v", err)
	}
	mustBeHeld(t, ctx, c, name, "while resumed")
	release(t, ctx, resumed)
	mustBeFree(t, ctx, c, name, "after the resumed lease's release")

	// A handle whose lock expired and went to another owner.
	lease = acquire(t, ctx, a, name)
	h, err = lease.Detach()
	if err != nil {
		t.Fatalf("Detach: %v", err)
	}
	var other *dlock.Lease
	if !Eventually(10*s.h.TTL, func() bool { other, err = c.TryAcquire(ctx, name); return err == nil }) {
		t.Fatalf("the detached lock was not free %v after its TTL: %v", 10*s.h.TTL, err)
	}
	if _, err := resumeDecided(ctx, b, h); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Resume of an expired handle = %v, want ErrNotHeld", err)
	}
	if err := other.Err(); err != nil {
		t.Errorf("the new owner's lease after a stale Resume: %v", err)
	}
	mustBeHeld(t, ctx, a, name, "the new owner's, after a stale Resume")
	release(t, ctx, other)

	// Another backend's handle, or a garbled one.
	foreign := h
	foreign.Scheme = "other"
	if _, err := b.Resume(ctx, foreign); !errors.Is(err, dlock.ErrBadHandle) {
		t.Errorf("Resume of another backend's handle = %v, want ErrBadHandle", err)
	}
	if _, err := dlock.ParseHandle("dlock1.garbled"); !errors.Is(err, dlock.ErrBadHandle) {
		t.Errorf("ParseHandle of a garbled text = %v, want ErrBadHandle", err)
	}
}

// resumeDecided is Resume until decided (see decided).
func resumeDecided(ctx context.Context, l *dlock.Locker, h dlock.Handle) (*dlock.Lease, error) {
	return decided(func() (*dlock.Lease, error) { return l.Resume(ctx, h) })
}
