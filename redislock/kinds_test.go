package redislock

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlockgo/dlock/driver"
)

// kindRequest returns a Request for name in mode, with a fresh owner.
func kindRequest(mode driver.Mode, name string, ttl time.Duration) driver.Request {
	r := request(name, ttl)
	r.Mode = mode
	switch mode {
	case driver.Permit:
		r.Limit = 1
	case driver.Leader:
		r.Value = "candidate-" + r.Owner[:8]
	}
	return r
}

func permitRequest(name string, limit int, ttl time.Duration) driver.Request {
	r := kindRequest(driver.Permit, name, ttl)
	r.Limit = limit
	return r
}

// mustLock takes r with TryLock and returns its token.
func mustLock(t *testing.T, d *Driver, r driver.Request) uint64 {
	t.Helper()
	g, err := d.TryLock(ctxTimeout(t, 5*time.Second), r)
	if err != nil {
		t.Fatalf("TryLock %s %q: %v", r.Mode, r.Name, err)
	}
	if g.Token == 0 {
		t.Fatalf("TryLock %s %q: token 0", r.Mode, r.Name)
	}
	return g.Token
}

// mustNotLock checks that TryLock of r fails with a *HeldError.
func mustNotLock(t *testing.T, d *Driver, r driver.Request) *driver.HeldError {
	t.Helper()
	_, err := d.TryLock(ctxTimeout(t, 5*time.Second), r)
	held, ok := errors.AsType[*driver.HeldError](err)
	if !ok || !errors.Is(err, driver.ErrNotAcquired) {
		t.Fatalf("TryLock %s %q: %v, want a *HeldError", r.Mode, r.Name, err)
	}
	return held
}

func mustUnlock(t *testing.T, d *Driver, r driver.Request) {
	t.Helper()
	if err := d.Unlock(ctxTimeout(t, 5*time.Second), r); err != nil {
		t.Fatalf("Unlock %s %q: %v", r.Mode, r.Name, err)
	}
}

// kindQueue returns the length of the wait queue of r's lock.
func kindQueue(t testing.TB, d *Driver, r driver.Request) int64 {
	t.Helper()
	n, err := d.client.LLen(ctxTimeout(t, 5*time.Second), d.keysFor(r)[2]).Result()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// waitKindQueued waits until the queue of r's lock has n entries.
func waitKindQueued(t *testing.T, d *Driver, r driver.Request, n int64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for kindQueue(t, d, r) != n {
		if time.Now().After(deadline) {
			t.Fatalf("queue of %s %q: %d, want %d", r.Mode, r.Name, kindQueue(t, d, r), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestSupports(t *testing.T) {
	d := NewDriver(nilClient, nil)
	for _, m := range []driver.Mode{driver.Exclusive, driver.Read, driver.Write, driver.Permit, driver.Leader} {
		if !d.Supports(m) {
			t.Errorf("Supports(%s) = false", m)
		}
	}
	if d.Supports(driver.Mode(99)) {
		t.Error("Supports(99) = true")
	}
	ctx := ctxTimeout(t, time.Second)
	if _, err := d.TryLock(ctx, kindRequest(driver.Mode(99), "x", time.Second)); !errors.Is(err, driver.ErrUnsupported) {
		t.Errorf("TryLock of mode 99: %v, want ErrUnsupported", err)
	}
	if _, err := d.TryLock(ctx, permitRequest("x", 0, time.Second)); err == nil || !strings.Contains(err.Error(), "limit") {
		t.Errorf("TryLock of a permit with limit 0: %v, want a limit error", err)
	}
}

// TestKindsAreSeparate: the mutex, readers-writer lock, semaphore and
// election of one name are four locks, each with its own tokens.
func TestKindsAreSeparate(t *testing.T) {
	d := newDriver(t, nil)
	name := "same/name"
	for _, m := range []driver.Mode{driver.Exclusive, driver.Write, driver.Permit, driver.Leader} {
		mustLock(t, d, kindRequest(m, name, 10*time.Second))
	}
	for _, m := range []driver.Mode{driver.Exclusive, driver.Read, driver.Permit, driver.Leader} {
		mustNotLock(t, d, kindRequest(m, name, 10*time.Second))
	}
	seen := map[string]bool{}
	for _, m := range []driver.Mode{driver.Exclusive, driver.Read, driver.Permit, driver.Leader} {
		for _, k := range d.keysFor(kindRequest(m, name, time.Second)) {
			if seen[k] {
				t.Errorf("key %q used by two kinds", k)
			}
			seen[k] = true
		}
	}
}
