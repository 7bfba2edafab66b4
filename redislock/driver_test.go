package redislock

import (
	"errors"
	"testing"
	"time"

	"github.com/dlockgo/dlock/driver"
)

func TestTryLockAndUnlock(t *testing.T) {
	d := newDriver(t, nil)
	ctx := ctxTimeout(t, 10*time.Second)
	a, b := request("orders/1", time.Second), request("orders/1", time.Second)

	before := time.Now()
	g, err := d.TryLock(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	if g.Token == 0 || g.OnLost != nil {
		t.Errorf("grant %+v: want a token and no OnLost", g)
	}
	if g.Expires.Before(before.Add(a.TTL)) || g.Expires.After(time.Now().Add(a.TTL)) {
		t.Errorf("Expires %v not within [send+ttl, now+ttl]", g.Expires)
	}

	_, err = d.TryLock(ctx, b)
	var held *driver.HeldError
	if !errors.As(err, &held) || !errors.Is(err, driver.ErrNotAcquired) {
		t.Fatalf("TryLock while held: %v, want a *HeldError", err)
	}
	if held.Remaining <= 0 || held.Remaining > a.TTL || held.Name != a.Name {
		t.Errorf("HeldError %+v: want the name and 0 < Remaining <= %v", held, a.TTL)
	}
	if n, m := queueState(t, d, a.Name); n != 0 || m != 0 {
		t.Errorf("TryLock queued: queue %d, entries %d", n, m)
	}

	// Idempotent for the same owner: same token, TTL renewed.
	g2, err := d.TryLock(ctx, a)
	if err != nil || g2.Token != g.Token {
		t.Errorf("TryLock again by the holder: %+v, %v; want token %d", g2, err, g.Token)
	}

	if err := d.Unlock(ctx, b); !errors.Is(err, driver.ErrNotHeld) {
		t.Errorf("Unlock by a non-owner: %v, want ErrNotHeld", err)
	}
	if _, err := d.Renew(ctx, b); !errors.Is(err, driver.ErrNotHeld) {
		t.Errorf("Renew by a non-owner: %v, want ErrNotHeld", err)
	}
	if _, err := d.Renew(ctx, a); err != nil {
		t.Errorf("Renew by the owner: %v", err)
	}
	if err := d.Unlock(ctx, a); err != nil {
		t.Fatal(err)
	}
	if err := d.Unlock(ctx, a); !errors.Is(err, driver.ErrNotHeld) {
		t.Errorf("second Unlock: %v, want ErrNotHeld", err)
	}
	if _, err := d.Renew(ctx, a); !errors.Is(err, driver.ErrNotHeld) {
		t.Errorf("Renew after Unlock: %v, want ErrNotHeld", err)
	}

	g3, err := d.TryLock(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	if g3.Token != g.Token+1 {
		t.Errorf("next token %d, want %d", g3.Token, g.Token+1)
	}
}

func TestFenceCounter(t *testing.T) {
	d := newDriver(t, &Options{FenceTTL: time.Hour})
	ctx := ctxTimeout(t, 10*time.Second)
	r := request("fence", time.Second)
	before := uint64(time.Now().UnixMicro())
	g, err := d.TryLock(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	// Seeded from the server's clock (the same machine's, here).
	if g.Token < before-uint64(time.Minute.Microseconds()) || g.Token > uint64(time.Now().Add(time.Minute).UnixMicro()) {
		t.Errorf("first token %d is not near the clock in µs (%d)", g.Token, before)
	}
	pttl, err := d.client.PTTL(ctx, d.keys(r.Name)[1]).Result()
	if err != nil {
		t.Fatal(err)
	}
	if pttl <= 59*time.Minute || pttl > time.Hour {
		t.Errorf("fence counter PTTL %v, want about FenceTTL (1h)", pttl)
	}
	ttl, err := d.client.PTTL(ctx, d.keys(r.Name)[0]).Result()
	if err != nil {
		t.Fatal(err)
	}
	if ttl <= 0 || ttl > time.Second {
		t.Errorf("lock PTTL %v, want (0, 1s]", ttl)
	}
}

func TestBadTTL(t *testing.T) {
	d := newDriver(t, nil)
	ctx := ctxTimeout(t, 5*time.Second)
	r := request("x", 500*time.Microsecond)
	if _, err := d.TryLock(ctx, r); err == nil {
		t.Error("TryLock with a sub-millisecond TTL succeeded")
	}
	if _, err := d.Lock(ctx, r); err == nil {
		t.Error("Lock with a sub-millisecond TTL succeeded")
	}
}
