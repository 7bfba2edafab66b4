package natslock_test

import (
	"testing"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/natslock"
)

// TestServerRestart kills the only server (SIGKILL) and starts it again
// on its store: tokens granted after the restart are above every token
// granted before, and a lease held across a restart shorter than its TTL
// is still held, renewed, afterwards.
func TestServerRestart(t *testing.T) {
	c := testenv.StartNATS(t, 1)
	o := &natslock.Options{Bucket: randomBucket()}
	l := newLocker(t, c, o, dlock.WithTTL(5*time.Second))
	ctx := ctxTimeout(t, 60*time.Second)
	var last uint64
	for range 5 {
		lease, err := l.Acquire(ctx, "restart/x")
		if err != nil {
			t.Fatal(err)
		}
		last = lease.Token()
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	held, err := l.Acquire(ctx, "restart/held")
	if err != nil {
		t.Fatal(err)
	}
	c.Servers[0].Kill()
	time.Sleep(500 * time.Millisecond)
	c.Servers[0].Start()
	restarted := time.Now()

	lease, err := l.Acquire(ctx, "restart/x")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("granted %v after the restart, token %d (last before: %d)", time.Since(restarted), lease.Token(), last)
	if lease.Token() <= max(last, held.Token()) {
		t.Errorf("token %d after the restart is not above %d, granted before", lease.Token(), max(last, held.Token()))
	}
	_ = lease.Release(ctx)

	time.Sleep(6 * time.Second) // past the TTL: only renewals keep it
	if err := held.Err(); err != nil {
		t.Errorf("the lease held across the restart: %v", err)
	}
	other := newLocker(t, c, o)
	if lease, err := other.TryAcquire(ctx, "restart/held"); err == nil {
		_ = lease.Release(ctx)
		t.Error("another client took the lock held across the restart")
	}
	if err := held.Release(ctx); err != nil {
		t.Errorf("Release of the lease held across the restart: %v", err)
	}
}
