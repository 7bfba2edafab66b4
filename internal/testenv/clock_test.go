package testenv

import (
	"context"
	"testing"
	"time"
)

// TestFakeClock runs a redis-server on a fake clock and reads it back
// with TIME; a fast clock must expire a key early.
func TestFakeClock(t *testing.T) {
	clock := NewFakeClock(t)
	srv := StartRedis(t, RedisOptions{Env: clock.Env()})
	c := srv.Client()
	ctx := context.Background()
	// ahead brackets how far the server's clock is ahead of the real one:
	// TIME is read between before and after, so the offset lies within
	// [at−after, at−before], however slow the round trip.
	ahead := func() (lo, hi time.Duration) {
		t.Helper()
		before := time.Now()
		at, err := c.Time(ctx).Result()
		after := time.Now()
		if err != nil {
			t.Fatal(err)
		}
		return at.Sub(after), at.Sub(before)
	}
	// near reports whether the offset can be want, give or take 50ms of
	// the fake clock's own slack.
	near := func(lo, hi, want time.Duration) bool {
		return lo-50*time.Millisecond <= want && want <= hi+50*time.Millisecond
	}
	if lo, hi := ahead(); !near(lo, hi, 0) {
		t.Fatalf("before any fault the server's clock is %v to %v off", lo, hi)
	}
	clock.Jump(30 * time.Second)
	if lo, hi := ahead(); !near(lo, hi, 30*time.Second) {
		t.Errorf("after a 30s jump the server's clock is %v to %v ahead", lo, hi)
	}
	clock.Reset()
	if lo, hi := ahead(); !near(lo, hi, 0) {
		t.Errorf("after Reset the server's clock is %v to %v off", lo, hi)
	}

	clock.SetRate(10)
	if err := c.Set(ctx, "k", "v", time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(250 * time.Millisecond) // 2.5s on the server's clock
	if n, err := c.Exists(ctx, "k").Result(); err != nil || n != 0 {
		t.Errorf("a 1s key on a 10× clock still exists after 250ms (n=%d, err=%v)", n, err)
	}
	if _, hi := ahead(); hi < 2*time.Second {
		t.Errorf("a 10× clock gained only %v in 250ms or more", hi)
	}
}
