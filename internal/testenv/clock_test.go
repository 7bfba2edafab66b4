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
	ahead := func() time.Duration {
		t.Helper()
		at, err := c.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		return time.Until(at) // the server's clock − the real one
	}
	if d := ahead(); d < -50*time.Millisecond || d > 50*time.Millisecond {
		t.Fatalf("before any fault the server's clock is %v off", d)
	}
	clock.Jump(30 * time.Second)
	if d := ahead(); d < 29900*time.Millisecond || d > 30100*time.Millisecond {
		t.Errorf("after a 30s jump the server's clock is %v ahead", d)
	}
	clock.Reset()
	if d := ahead(); d < -50*time.Millisecond || d > 50*time.Millisecond {
		t.Errorf("after Reset the server's clock is %v off", d)
	}

	clock.SetRate(10)
	if err := c.Set(ctx, "k", "v", time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(250 * time.Millisecond) // 2.5s on the server's clock
	if n, err := c.Exists(ctx, "k").Result(); err != nil || n != 0 {
		t.Errorf("a 1s key on a 10× clock still exists after 250ms (n=%d, err=%v)", n, err)
	}
	if d := ahead(); d < 2*time.Second {
		t.Errorf("a 10× clock gained only %v in 250ms", d)
	}
}
