package memlock_test

import (
	"context"
	"errors"
	"testing"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/locktest"
	"github.com/dlockgo/dlock/memlock"
)

func TestConformance(t *testing.T) {
	store := memlock.NewStore()
	locktest.Run(t, locktest.Harness{
		NewLocker: func(t *testing.T, opts ...dlock.Option) *dlock.Locker {
			l, err := memlock.New(store, opts...)
			if err != nil {
				t.Fatal(err)
			}
			return l
		},
		TakeAway: func(t *testing.T, name string) { store.Revoke(name) },
	})
}

func TestOpen(t *testing.T) {
	ctx := context.Background()
	a, err := dlock.Open(ctx, "mem://shared-test?ttl=5s")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := dlock.Open(ctx, "mem://shared-test")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	other, err := dlock.Open(ctx, "mem://other-test")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()

	lease, err := a.TryAcquire(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	if lease.TTL().String() != "5s" {
		t.Errorf("TTL from URL = %v, want 5s", lease.TTL())
	}
	if _, err := b.TryAcquire(ctx, "job"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("same store: TryAcquire = %v, want ErrNotAcquired", err)
	}
	l2, err := other.TryAcquire(ctx, "job")
	if err != nil {
		t.Errorf("other store: TryAcquire = %v, want success", err)
	} else {
		_ = l2.Release(ctx)
	}
	_ = lease.Release(ctx)

	for _, bad := range []struct{ url, param string }{
		{"mem://?colour=red", "colour"},
		{"mem://x?ttl=soon", "ttl"},
		{"mem://x?ttl=1ms", "ttl"},
		{"mem://x?renew=maybe", "renew"},
		{"mem://x/path", "path"},
	} {
		locktest.OpenFails(t, ctx, bad.url, bad.param)
	}
}
