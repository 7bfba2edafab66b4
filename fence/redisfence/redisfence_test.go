package redisfence_test

import (
	"context"
	"crypto/rand"
	"errors"
	"math"
	mrand "math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock/fence"
	"github.com/dlockgo/dlock/fence/redisfence"
	"github.com/dlockgo/dlock/internal/testenv"
)

// prefix returns a key prefix of the test's own on the shared Redis and
// deletes its keys when the test ends.
func prefix(t testing.TB, c *redis.Client) string {
	t.Helper()
	p := "dlock-test:redisfence:" + rand.Text()[:10] + ":"
	t.Cleanup(func() {
		ctx := context.Background()
		keys, _ := c.Keys(ctx, p+"*").Result()
		if len(keys) > 0 {
			c.Del(ctx, keys...)
		}
	})
	return p
}

func TestSetStaleRejectedWithBothTokens(t *testing.T) {
	c := testenv.RedisClient(t)
	ctx := context.Background()
	key := prefix(t, c) + "report"
	if err := redisfence.Set(ctx, c, key, "v7", 7); err != nil {
		t.Fatalf("Set(7): %v", err)
	}
	if err := redisfence.Set(ctx, c, key, "v7b", 7); err != nil {
		t.Fatalf("Set(7) again (same holder): %v", err)
	}
	err := redisfence.Set(ctx, c, key, "v5", 5)
	se, ok := errors.AsType[*fence.StaleError](err)
	if !ok || !errors.Is(err, fence.ErrStale) {
		t.Fatalf("Set(5) after 7: %v, want a *fence.StaleError", err)
	}
	if want := (fence.StaleError{Resource: key, Token: 5, Highest: 7}); *se != want {
		t.Fatalf("StaleError = %+v, want %+v", *se, want)
	}
	v, tok, err := redisfence.Get(ctx, c, key)
	if err != nil || v != "v7b" || tok != 7 {
		t.Fatalf("Get = %q, %d, %v; want v7b, 7 (the stale write changed nothing)", v, tok, err)
	}
	if err := redisfence.Set(ctx, c, key, "v0", 0); !errors.Is(err, fence.ErrInvalidToken) {
		t.Fatalf("Set(0): %v, want ErrInvalidToken", err)
	}
	if err := redisfence.Set(ctx, c, key, []byte("v8"), 8); err != nil {
		t.Fatalf("Set(8): %v", err)
	}
	if v, tok, _ := redisfence.Get(ctx, c, key); v != "v8" || tok != 8 {
		t.Fatalf("Get = %q, %d; want v8, 8", v, tok)
	}
	if _, _, err := redisfence.Get(ctx, c, key+":none"); err != redis.Nil {
		t.Fatalf("Get of a missing key: %v, want redis.Nil", err)
	}
}

// TestTokenComparisonIsExact uses tokens that doubles cannot tell apart
// and tokens of different lengths, with Set and with Admit.
func TestTokenComparisonIsExact(t *testing.T) {
	c := testenv.RedisClient(t)
	ctx := context.Background()
	p := prefix(t, c)
	fns := map[string]func(key string, tok uint64) error{
		"Set":   func(key string, tok uint64) error { return redisfence.Set(ctx, c, key, tok, tok) },
		"Admit": func(key string, tok uint64) error { return redisfence.Admit(ctx, c, key, tok) },
	}
	steps := []struct {
		tok   uint64
		stale bool
	}{
		{9, false}, {10, false}, {9, true}, {99, false}, {100, false},
		{1 << 60, false}, {1<<60 + 1, false}, {1 << 60, true},
		{math.MaxUint64 - 1, false}, {math.MaxUint64, false}, {math.MaxUint64 - 1, true},
	}
	for name, fn := range fns {
		key := p + name
		for _, s := range steps {
			err := fn(key, s.tok)
			if s.stale != errors.Is(err, fence.ErrStale) || (err != nil && !s.stale) {
				t.Fatalf("%s(%d): %v, want stale %v", name, s.tok, err, s.stale)
			}
		}
		se, _ := errors.AsType[*fence.StaleError](fn(key, 1))
		if se == nil || se.Highest != math.MaxUint64 {
			t.Fatalf("%s: Highest in the error = %v, want %d", name, se, uint64(math.MaxUint64))
		}
	}
	if v, _, _ := redisfence.Get(ctx, c, p+"Set"); v != strconv.FormatUint(math.MaxUint64, 10) {
		t.Fatalf("value = %q, want the largest token's", v)
	}
}

// TestAdmitSharesTheToken: Admit and Set on one key fence each other, and
// Admit leaves the value alone. Both live in the one hash, so they share
// a hash slot on Redis Cluster.
func TestAdmitSharesTheToken(t *testing.T) {
	c := testenv.RedisClient(t)
	ctx := context.Background()
	p := prefix(t, c)
	key := p + "doc"
	if err := redisfence.Set(ctx, c, key, "first", 3); err != nil {
		t.Fatal(err)
	}
	if err := redisfence.Admit(ctx, c, key, 4); err != nil {
		t.Fatal(err)
	}
	if v, tok, err := redisfence.Get(ctx, c, key); v != "first" || tok != 4 || err != nil {
		t.Fatalf("Get after Admit(4) = %q, %d, %v; want first, 4", v, tok, err)
	}
	if err := redisfence.Set(ctx, c, key, "late", 3); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("Set(3) after Admit(4): %v, want ErrStale", err)
	}
	keys, err := c.Keys(ctx, p+"*").Result()
	if err != nil || len(keys) != 1 || keys[0] != key {
		t.Fatalf("keys under the prefix: %v, %v; want only %s (value and token in one key)", keys, err, key)
	}
	h, err := c.HGetAll(ctx, key).Result()
	if err != nil || len(h) != 2 || h[redisfence.ValueField] != "first" || h[redisfence.TokenField] != "4" {
		t.Fatalf("HGETALL %s = %v, %v", key, h, err)
	}

	// Admit alone on a new key: a token and no value.
	k2 := p + "tokenonly"
	if err := redisfence.Admit(ctx, c, k2, 2); err != nil {
		t.Fatal(err)
	}
	if _, tok, err := redisfence.Get(ctx, c, k2); err != redis.Nil || tok != 2 {
		t.Fatalf("Get of a token-only key = %d, %v; want 2, redis.Nil", tok, err)
	}

	var g fence.Guard = redisfence.Guard{Client: c, Prefix: p}
	if err := g.Admit(ctx, "doc", 5); err != nil {
		t.Fatal(err)
	}
	se, ok := errors.AsType[*fence.StaleError](g.Admit(ctx, "doc", 4))
	if !ok || se.Resource != "doc" || se.Highest != 5 {
		t.Fatalf("Guard.Admit(4) after 5 = %+v, want stale on resource doc with highest 5", se)
	}
	if err := redisfence.Set(ctx, c, key, "x", 4); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("Guard.Admit wrote elsewhere than Prefix+resource: Set(4) = %v", err)
	}
}

// TestWrongType reports Redis's error for a key that is not a hash.
func TestWrongType(t *testing.T) {
	c := testenv.RedisClient(t)
	ctx := context.Background()
	key := prefix(t, c) + "plain"
	c.Set(ctx, key, "x", 0)
	err := redisfence.Set(ctx, c, key, "v", 1)
	if err == nil || errors.Is(err, fence.ErrStale) {
		t.Fatalf("Set on a string key: %v, want Redis's WRONGTYPE error", err)
	}
}

// TestConcurrentSet runs writers with random, roughly growing tokens: at
// the end the key holds the value of the largest token tried, every
// rejection names a higher token, and the stored token never went down as
// seen by a reader polling meanwhile.
func TestConcurrentSet(t *testing.T) {
	c := testenv.RedisClient(t)
	ctx := context.Background()
	key := prefix(t, c) + "counter"
	var next atomic.Uint64
	var mu sync.Mutex
	var maxTok uint64
	var admitted, rejected int
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var readerErr error
	var readerSeen int
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		var last uint64
		for {
			select {
			case <-stop:
				return
			default:
			}
			v, tok, err := redisfence.Get(ctx, c, key)
			if err == redis.Nil {
				continue
			}
			if err == nil && (tok < last || v != "v"+strconv.FormatUint(tok, 10)) {
				err = errors.New("token went from " + strconv.FormatUint(last, 10) + " to " + strconv.FormatUint(tok, 10) + " with value " + v)
			}
			if err != nil {
				readerErr = err
				return
			}
			last = tok
			readerSeen++
		}
	}()
	for w := range 8 {
		wg.Go(func() {
			r := mrand.New(mrand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))
			for range 200 {
				tok := next.Add(1) + r.Uint64N(16)
				err := redisfence.Set(ctx, c, key, "v"+strconv.FormatUint(tok, 10), tok)
				mu.Lock()
				maxTok = max(maxTok, tok)
				switch se, ok := errors.AsType[*fence.StaleError](err); {
				case err == nil:
					admitted++
				case ok && se.Token == tok && se.Highest > tok:
					rejected++
				default:
					t.Errorf("Set(%d): %v", tok, err)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(stop)
	<-readerDone
	if readerErr != nil {
		t.Fatalf("reader: %v", readerErr)
	}
	if rejected == 0 || admitted == 0 {
		t.Fatalf("%d admitted, %d rejected: the tokens did not interleave", admitted, rejected)
	}
	v, tok, err := redisfence.Get(ctx, c, key)
	if err != nil || tok != maxTok || v != "v"+strconv.FormatUint(maxTok, 10) {
		t.Fatalf("Get = %q, %d, %v; want the largest token's value, v%d", v, tok, err, maxTok)
	}
	t.Logf("%d admitted, %d rejected, reader saw %d states", admitted, rejected, readerSeen)
}

// TestAfterScriptFlush runs on a Redis of the test's own, whose script
// cache it empties: Set and Admit load their scripts again.
func TestAfterScriptFlush(t *testing.T) {
	s := testenv.StartRedis(t, testenv.RedisOptions{})
	c := s.Client()
	ctx := context.Background()
	if err := redisfence.Set(ctx, c, "k", "a", 1); err != nil {
		t.Fatal(err)
	}
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := redisfence.Set(ctx, c, "k", "b", 2); err != nil {
		t.Fatalf("Set after SCRIPT FLUSH: %v", err)
	}
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := redisfence.Admit(ctx, c, "k", 1); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("Admit(1) after SCRIPT FLUSH: %v, want ErrStale", err)
	}
	if v, tok, _ := redisfence.Get(ctx, c, "k"); v != "b" || tok != 2 {
		t.Fatalf("Get = %q, %d; want b, 2", v, tok)
	}
}

// TestRedisCluster runs the fence scripts through a ClusterClient. Redis
// Cluster refuses a script whose keys are in different slots (CROSSSLOT),
// so that shows that a key's value and token share a slot.
func TestRedisCluster(t *testing.T) {
	cs := testenv.StartRedisCluster(t, testenv.ClusterOptions{})
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cs.Addrs()})
	defer c.Close()
	ctx := context.Background()

	// The control: a script over two keys in different slots is refused,
	// so the fence scripts below would be too if they used two keys.
	err := c.Eval(ctx, "return 1", []string{"a", "b"}).Err()
	if err == nil || !strings.Contains(err.Error(), "CROSSSLOT") {
		t.Fatalf("a two-slot script: %v, want CROSSSLOT", err)
	}

	for _, key := range []string{"orders:1", "orders:2", "{user:7}:profile"} {
		if err := redisfence.Set(ctx, c, key, "v2", 2); err != nil {
			t.Fatalf("Set(%s) on Redis Cluster: %v", key, err)
		}
		if err := redisfence.Set(ctx, c, key, "v1", 1); !errors.Is(err, fence.ErrStale) {
			t.Fatalf("Set(%s, 1) after 2: %v, want ErrStale", key, err)
		}
		if v, tok, err := redisfence.Get(ctx, c, key); v != "v2" || tok != 2 || err != nil {
			t.Fatalf("Get(%s) = %q, %d, %v", key, v, tok, err)
		}
	}
	g := redisfence.Guard{Client: c, Prefix: "guard:"}
	if err := g.Admit(ctx, "x", 5); err != nil {
		t.Fatal(err)
	}
	if err := g.Admit(ctx, "x", 4); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("Guard.Admit(4) after 5 on Redis Cluster: %v", err)
	}
}

func BenchmarkSet(b *testing.B) {
	c := testenv.RedisClient(b)
	ctx := context.Background()
	key := prefix(b, c) + "bench"
	b.ReportAllocs()
	for tok := uint64(1); b.Loop(); tok++ {
		if err := redisfence.Set(ctx, c, key, "value", tok); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkGuardAdmit(b *testing.B) {
	c := testenv.RedisClient(b)
	g := redisfence.Guard{Client: c, Prefix: prefix(b, c)}
	ctx := context.Background()
	b.ReportAllocs()
	for tok := uint64(1); b.Loop(); tok++ {
		if err := g.Admit(ctx, "bench", tok); err != nil {
			b.Fatal(err)
		}
	}
}
