package redislock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlockgo/dlock/driver"
)

func TestRWTryLock(t *testing.T) {
	d := newDriver(t, nil)
	ctx := ctxTimeout(t, 10*time.Second)
	name := "rw/try"
	r1 := kindRequest(driver.Read, name, 10*time.Second)
	r2 := kindRequest(driver.Read, name, 10*time.Second)
	t1 := mustLock(t, d, r1)
	t2 := mustLock(t, d, r2)
	if t2 <= t1 {
		t.Errorf("second reader's token %d, not above the first's %d", t2, t1)
	}
	// A holder asking again gets its own token back.
	if again := mustLock(t, d, r1); again != t1 {
		t.Errorf("TryLock again by a reader: token %d, want %d", again, t1)
	}
	w := kindRequest(driver.Write, name, 10*time.Second)
	held := mustNotLock(t, d, w)
	if held.Remaining <= 9*time.Second || held.Remaining > 10*time.Second {
		t.Errorf("writer blocked by readers: Remaining %v, want the earliest reader's (about 10s)", held.Remaining)
	}
	if kindQueue(t, d, w) != 0 {
		t.Error("TryLock queued")
	}

	// Renew and Unlock act only for the owner, in its mode.
	wrongMode := r1
	wrongMode.Mode = driver.Write
	if _, err := d.Renew(ctx, wrongMode); !errors.Is(err, driver.ErrNotHeld) {
		t.Errorf("Renew of a reader's owner as a writer: %v, want ErrNotHeld", err)
	}
	if err := d.Unlock(ctx, wrongMode); !errors.Is(err, driver.ErrNotHeld) {
		t.Errorf("Unlock of a reader's owner as a writer: %v, want ErrNotHeld", err)
	}
	if _, err := d.Renew(ctx, r1); err != nil {
		t.Errorf("Renew by a reader: %v", err)
	}
	mustUnlock(t, d, r1)
	if err := d.Unlock(ctx, r1); !errors.Is(err, driver.ErrNotHeld) {
		t.Errorf("second Unlock of a reader: %v, want ErrNotHeld", err)
	}
	if _, err := d.Renew(ctx, r1); !errors.Is(err, driver.ErrNotHeld) {
		t.Errorf("Renew after Unlock: %v, want ErrNotHeld", err)
	}
	mustNotLock(t, d, w)
	mustUnlock(t, d, r2)

	tw := mustLock(t, d, w)
	if tw <= t2 {
		t.Errorf("writer's token %d, not above the readers' %d", tw, t2)
	}
	mustNotLock(t, d, kindRequest(driver.Read, name, time.Second))
	mustNotLock(t, d, kindRequest(driver.Write, name, time.Second))
	if _, err := d.Renew(ctx, w); err != nil {
		t.Errorf("Renew by the writer: %v", err)
	}
	mustUnlock(t, d, w)
	mustLock(t, d, kindRequest(driver.Read, name, time.Second))
}

// TestRWWriterPreference: a waiting writer goes before readers that come
// after it; TryLock for reading fails while it waits.
func TestRWWriterPreference(t *testing.T) {
	d := newDriver(t, nil)
	ctx := ctxTimeout(t, 20*time.Second)
	name := "rw/writer-first"
	r1 := kindRequest(driver.Read, name, 10*time.Second)
	mustLock(t, d, r1)

	w := kindRequest(driver.Write, name, quietTTL)
	wres := lockAsync(ctx, newDriverOn(t, d.client, quietOptions(d)), w)
	waitKindQueued(t, d, w, 1)

	mustNotLock(t, d, kindRequest(driver.Read, name, 10*time.Second))
	r2 := kindRequest(driver.Read, name, 10*time.Second)
	rres := lockAsync(ctx, newDriverOn(t, d.client, &Options{Prefix: d.prefix}), r2)
	waitKindQueued(t, d, w, 2)

	released := time.Now()
	mustUnlock(t, d, r1)
	got := <-wres
	if got.err != nil {
		t.Fatal(got.err)
	}
	if lat := got.at.Sub(released); lat > messageBound {
		t.Errorf("writer got the lock %v after the last reader left, its re-checks 30 s apart: not by message", lat)
	}
	select {
	case res := <-rres:
		t.Fatalf("a reader got the lock while the writer holds it: %+v", res)
	case <-time.After(100 * time.Millisecond):
	}
	mustUnlock(t, d, w)
	if res := <-rres; res.err != nil {
		t.Fatal(res.err)
	} else if res.g.Token <= got.g.Token {
		t.Errorf("reader's token %d not above the writer's %d", res.g.Token, got.g.Token)
	}
	mustUnlock(t, d, r2)
}

// TestRWReadersAdmittedTogether: a writer's release admits every reader
// at the head of the queue at once, up to the next writer.
func TestRWReadersAdmittedTogether(t *testing.T) {
	d := newDriver(t, nil)
	ctx := ctxTimeout(t, 20*time.Second)
	name := "rw/together"
	w1 := kindRequest(driver.Write, name, 10*time.Second)
	t0 := mustLock(t, d, w1)

	other := func() *Driver { return newDriverOn(t, d.client, quietOptions(d)) }
	var readers []driver.Request
	var results []<-chan lockResult
	for i := range 3 {
		r := kindRequest(driver.Read, name, quietTTL)
		readers = append(readers, r)
		results = append(results, lockAsync(ctx, other(), r))
		waitKindQueued(t, d, w1, int64(i+1))
	}
	w2 := kindRequest(driver.Write, name, 10*time.Second)
	w2res := lockAsync(ctx, other(), w2)
	waitKindQueued(t, d, w1, 4)
	late := kindRequest(driver.Read, name, 10*time.Second)
	lateRes := lockAsync(ctx, other(), late)
	waitKindQueued(t, d, w1, 5)

	released := time.Now()
	mustUnlock(t, d, w1)
	tokens := map[uint64]bool{}
	for i, ch := range results {
		got := <-ch
		if got.err != nil {
			t.Fatalf("reader %d: %v", i, got.err)
		}
		if lat := got.at.Sub(released); lat > messageBound {
			t.Errorf("reader %d admitted %v after the release, its re-checks 30 s apart: not by message", i, lat)
		}
		if got.g.Token <= t0 || tokens[got.g.Token] {
			t.Errorf("reader %d: token %d (writer's %d, others %v)", i, got.g.Token, t0, tokens)
		}
		tokens[got.g.Token] = true
	}
	if n := kindQueue(t, d, w1); n != 2 {
		t.Errorf("queue after admitting the readers: %d, want 2 (the writer and the late reader)", n)
	}
	select {
	case <-w2res:
		t.Fatal("the second writer got the lock with readers in it")
	case <-lateRes:
		t.Fatal("the late reader overtook the waiting writer")
	case <-time.After(100 * time.Millisecond):
	}
	for _, r := range readers[:2] {
		mustUnlock(t, d, r)
	}
	select {
	case <-w2res:
		t.Fatal("the second writer got the lock with a reader in it")
	case <-time.After(50 * time.Millisecond):
	}
	mustUnlock(t, d, readers[2])
	if got := <-w2res; got.err != nil {
		t.Fatal(got.err)
	}
	mustUnlock(t, d, w2)
	if got := <-lateRes; got.err != nil {
		t.Fatal(got.err)
	}
	mustUnlock(t, d, late)
}

// TestRWCancelledWriterAdmitsReaders: readers queued behind a waiting
// writer are admitted when that writer gives up.
func TestRWCancelledWriterAdmitsReaders(t *testing.T) {
	d := newDriver(t, nil)
	ctx := ctxTimeout(t, 20*time.Second)
	name := "rw/writer-gives-up"
	r1 := kindRequest(driver.Read, name, 10*time.Second)
	mustLock(t, d, r1)
	wctx, cancel := context.WithCancel(ctx)
	w := kindRequest(driver.Write, name, 10*time.Second)
	wres := lockAsync(wctx, newDriverOn(t, d.client, &Options{Prefix: d.prefix}), w)
	waitKindQueued(t, d, w, 1)
	r2 := kindRequest(driver.Read, name, quietTTL)
	rres := lockAsync(ctx, newDriverOn(t, d.client, quietOptions(d)), r2)
	waitKindQueued(t, d, w, 2)

	cancelled := time.Now()
	cancel()
	if got := <-wres; !errors.Is(got.err, context.Canceled) {
		t.Fatalf("cancelled writer: %v", got.err)
	}
	got := <-rres
	if got.err != nil {
		t.Fatal(got.err)
	}
	if lat := got.at.Sub(cancelled); lat > messageBound {
		t.Errorf("reader admitted %v after the writer left, its re-checks 30 s apart: not by message", lat)
	}
	if n := kindQueue(t, d, w); n != 0 {
		t.Errorf("queue left: %d", n)
	}
	mustUnlock(t, d, r1)
	mustUnlock(t, d, r2)
}

// TestRWCrashedReader: a reader that stops renewing drops out when its
// TTL ends, and a waiting writer takes the lock then.
func TestRWCrashedReader(t *testing.T) {
	d := newDriver(t, nil)
	ctx := ctxTimeout(t, 20*time.Second)
	name := "rw/crashed-reader"
	ttl := 500 * time.Millisecond
	start := time.Now()
	mustLock(t, d, kindRequest(driver.Read, name, ttl))
	// The writer's re-checks are 30 s apart: a takeover within
	// messageBound of the reader's TTL came from the timer set to that
	// known expiry.
	got := <-lockAsync(ctx, newDriverOn(t, d.client, quietOptions(d)), kindRequest(driver.Write, name, quietTTL))
	if got.err != nil {
		t.Fatal(got.err)
	}
	after := got.at.Sub(start)
	if after < ttl-20*time.Millisecond || after > ttl+messageBound {
		t.Errorf("writer took over after %v, want right after the reader's TTL %v", after, ttl)
	}
	n, err := d.client.ZCard(ctx, d.keysFor(kindRequest(driver.Read, name, ttl))[5]).Result()
	if err != nil || n != 0 {
		t.Errorf("readers left: %d, %v", n, err)
	}
}
