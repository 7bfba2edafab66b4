package mysqllock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/mysqllock"
)

// TestKillLoss: KILL of the holder's connection frees the lock on the
// server at once; the holder's Done closes within the keep-alive period,
// and another client gets the lock with a greater token.
func TestKillLoss(t *testing.T) {
	ctx := testContext(t, 30*time.Second)
	o := mysqllock.Options{Table: testTable(t), KeepAlive: 100 * time.Millisecond}
	a, d := newLocker(t, o)
	b, _ := newLocker(t, o)
	adm := newAdmin(t)
	lease, err := a.Acquire(ctx, "kill/me")
	if err != nil {
		t.Fatal(err)
	}
	id := adm.holder(d.LockName("kill/me"))
	if id == 0 {
		t.Fatal("IS_USED_LOCK finds no holder")
	}
	adm.kill(id)
	killed := time.Now()
	// KILL returns before the killed connection's locks are free: the lock
	// is free once the connection is gone from the server.
	if !eventually(5*time.Second, func() bool { return !adm.alive(id) }) {
		t.Fatalf("connection %d still on the server 5s after KILL", id)
	}
	other, err := b.TryAcquire(ctx, "kill/me")
	if err != nil {
		t.Fatalf("TryAcquire once the killed connection is gone: %v", err)
	}
	defer other.Release(ctx)
	select {
	case <-lease.Done():
		t.Logf("Done closed %v after the KILL", time.Since(killed))
	case <-time.After(2 * time.Second):
		t.Fatal("Done not closed 2s after the holder's connection was killed")
	}
	if !errors.Is(lease.Err(), dlock.ErrLost) {
		t.Errorf("Err() = %v, want ErrLost", lease.Err())
	}
	if other.Token() <= lease.Token() {
		t.Errorf("new token %d not greater than the killed holder's %d", other.Token(), lease.Token())
	}
	if err := lease.Release(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Release after the KILL = %v, want ErrNotHeld", err)
	}
	if err := lease.Refresh(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Refresh after the KILL = %v, want ErrNotHeld", err)
	}
}

// TestRefresh: Refresh checks on the server, at once, that the lock is
// still held.
func TestRefresh(t *testing.T) {
	ctx := testContext(t, 30*time.Second)
	a, d := newLocker(t, mysqllock.Options{KeepAlive: time.Hour})
	adm := newAdmin(t)
	lease, err := a.Acquire(ctx, "refresh")
	if err != nil {
		t.Fatal(err)
	}
	if err := lease.Refresh(ctx); err != nil {
		t.Fatalf("Refresh while held: %v", err)
	}
	adm.kill(adm.holder(d.LockName("refresh")))
	// The keep-alive period is an hour: only Refresh can notice.
	if err := lease.Refresh(ctx); !errors.Is(err, dlock.ErrNotHeld) || !errors.Is(err, dlock.ErrLost) {
		t.Errorf("Refresh after the KILL = %v, want ErrNotHeld and ErrLost", err)
	}
	if !errors.Is(lease.Err(), dlock.ErrLost) {
		t.Errorf("Err() = %v, want ErrLost", lease.Err())
	}
}

// TestSilentHolder: a holder whose process stops (no keep-alive reaches the
// server) loses the lock after the TTL, the server's wait_timeout on its
// connection; it reports the loss when it runs again. On the caller's
// pool and on an exclusive pool opened from a URL whose ttl (an hour)
// differs from the acquisition's (1s). By construction: the freeze alone
// frees nothing (the lock is still held right after it), and the holder
// stays frozen for 10s, 10× the TTL, so only the acquisition's TTL can
// explain another client's grant before the holder resumes.
func TestSilentHolder(t *testing.T) {
	table := testTable(t)
	for _, mode := range []string{"caller's pool", "exclusive pool"} {
		t.Run(mode, func(t *testing.T) {
			ctx := testContext(t, 30*time.Second)
			o := mysqllock.Options{Table: table, KeepAlive: 100 * time.Millisecond}
			var a *dlock.Locker
			if mode == "exclusive pool" {
				var err error
				if a, err = dlock.Open(ctx, serverURL(t, "table="+table+"&keepalive=100ms&ttl=1h")); err != nil {
					t.Fatal(err)
				}
				defer a.Close()
			} else {
				a, _ = newLocker(t, o)
			}
			b, _ := newLocker(t, o)
			lease, err := a.Acquire(ctx, "silent", dlock.WithTTL(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			const freeze = 10 * time.Second
			a.Driver().(*mysqllock.Driver).Freeze(freeze)
			start := time.Now()
			if l, err := b.TryAcquire(ctx, "silent"); !errors.Is(err, dlock.ErrNotAcquired) {
				t.Errorf("TryAcquire right after the holder went silent = %v, want ErrNotAcquired", err)
				if err == nil {
					_ = l.Release(ctx)
				}
			}
			other, err := b.Acquire(ctx, "silent")
			if err != nil {
				t.Fatal(err)
			}
			took := time.Since(start)
			t.Logf("another client acquired %v after the holder went silent (TTL 1s)", took)
			if took >= freeze {
				t.Errorf("another client acquired %v after the holder went silent, once it had resumed: the TTL (1s) did not free the lock", took)
			}
			defer other.Release(ctx)
			select {
			case <-lease.Done():
			case <-time.After(freeze + 5*time.Second):
				t.Fatal("the silent holder's Done did not close after it resumed")
			}
			if !errors.Is(lease.Err(), dlock.ErrLost) {
				t.Errorf("Err() = %v, want ErrLost", lease.Err())
			}
		})
	}
}

// TestCrashedProcess: a process that dies closes its sockets; the server
// frees its lock at once.
func TestCrashedProcess(t *testing.T) {
	ctx := testContext(t, 30*time.Second)
	table := testTable(t)
	var socks sockets
	a, err := mysqllock.New(newDB(t, &socks), &mysqllock.Options{Table: table, KeepAlive: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, _ := newLocker(t, mysqllock.Options{Table: table})
	lease, err := a.Acquire(ctx, "crash")
	if err != nil {
		t.Fatal(err)
	}
	socks.cut()
	start := time.Now()
	other, err := b.Acquire(ctx, "crash")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("another client acquired %v after the holder's sockets closed", time.Since(start))
	if took := time.Since(start); took > time.Second {
		t.Errorf("another client waited %v after the holder's sockets closed", took)
	}
	defer other.Release(ctx)
	select {
	case <-lease.Done():
	case <-time.After(2 * time.Second):
		t.Fatal("Done not closed after the holder's connection was cut")
	}
}
