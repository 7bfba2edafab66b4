package redispipe

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/internal/testenv"
)

var echo = NewScript(`return ARGV[1]`)

// batchCounter counts the commands go-redis sends alone and in pipelines.
type batchCounter struct {
	single, pipelines, piped atomic.Int64
}

func (h *batchCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *batchCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.single.Add(1)
		return next(ctx, cmd)
	}
}

func (h *batchCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.pipelines.Add(1)
		h.piped.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// Concurrent calls all get their own answer, and calls that arrive while a
// batch is on the wire go out together.
func TestConcurrentCallsAreBatched(t *testing.T) {
	c := testenv.RedisClient(t)
	h := &batchCounter{}
	c.AddHook(h)
	s := NewSender(c, 1, echo)
	defer s.Close()
	ctx := t.Context()
	const workers, calls = 32, 50
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range calls {
				want := fmt.Sprintf("%d/%d", w, i)
				got, err := s.Do(ctx, echo, nil, want).Text()
				if err != nil || got != want {
					t.Errorf("Do(%q) = %q, %v", want, got, err)
					return
				}
			}
		})
	}
	wg.Wait()
	total := h.single.Load() + h.piped.Load()
	if total < workers*calls {
		t.Fatalf("%d commands sent for %d calls", total, workers*calls)
	}
	if h.pipelines.Load() == 0 {
		t.Fatalf("no pipeline sent for %d concurrent callers (%d sent alone)", workers, h.single.Load())
	}
	t.Logf("%d calls: %d alone, %d in %d pipelines (%.1f per pipeline)", workers*calls,
		h.single.Load(), h.piped.Load(), h.pipelines.Load(), float64(h.piped.Load())/float64(h.pipelines.Load()))
}

// After the server lost its scripts, calls alone and in pipelines load
// them again and succeed.
func TestReloadsScriptsAfterFlush(t *testing.T) {
	c := testenv.RedisClient(t)
	other := NewScript(`return 'other ' .. ARGV[1]`)
	s := NewSender(c, 1, echo, other)
	defer s.Close()
	ctx := t.Context()
	for round := range 2 {
		if err := c.ScriptFlush(ctx).Err(); err != nil {
			t.Fatalf("SCRIPT FLUSH: %v", err)
		}
		n := 1 + round*15 // alone, then many at once
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				sc, want := echo, fmt.Sprint(i)
				if i%2 == 1 {
					sc, want = other, "other "+fmt.Sprint(i)
				}
				if got, err := s.Do(ctx, sc, nil, i).Text(); err != nil || got != want {
					t.Errorf("round %d: Do = %q, %v; want %q", round, got, err, want)
				}
			})
		}
		wg.Wait()
	}
}

// A call whose context has ended before it is sent is answered with the
// context's error and never reaches the server.
func TestDoneContextIsNotSent(t *testing.T) {
	c := testenv.RedisClient(t)
	s := NewSender(c, 1, echo)
	defer s.Close()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	key := fmt.Sprintf("redispipe-test:%d", time.Now().UnixNano())
	set := NewScript(`return redis.call('SET', KEYS[1], '1')`)
	if err := s.Do(ctx, set, []string{key}).Err(); !errors.Is(err, context.Canceled) {
		t.Fatalf("Do with a cancelled context = %v, want context.Canceled", err)
	}
	if n := c.Exists(t.Context(), key).Val(); n != 0 {
		t.Fatalf("the call ran although its context had ended")
	}
}

// One caller's cancellation does not fail the others' calls in its batch.
func TestCancelDoesNotSpill(t *testing.T) {
	c := testenv.RedisClient(t)
	s := NewSender(c, 1, echo)
	defer s.Close()
	slow := NewScript(`local t = redis.call('TIME') local s = tonumber(t[1]) * 1e6 + tonumber(t[2])
repeat t = redis.call('TIME') until tonumber(t[1]) * 1e6 + tonumber(t[2]) > s + 20000
return 1`)
	var wg sync.WaitGroup
	for i := range 40 {
		ctx, cancel := context.WithCancel(t.Context())
		wg.Go(func() {
			if i%2 == 0 {
				_ = s.Do(ctx, slow, nil).Err() // holds the wire for batches to form
				return
			}
			if err := s.Do(t.Context(), echo, nil, i).Err(); err != nil {
				t.Errorf("call %d failed: %v", i, err)
			}
		})
		if i%4 == 0 {
			cancel()
		} else {
			defer cancel()
		}
	}
	wg.Wait()
}

// Close answers queued calls with driver.ErrClosed, later calls at once,
// and leaves no goroutine behind.
func TestClose(t *testing.T) {
	c := testenv.RedisClient(t)
	if err := c.Ping(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	before := runtime.NumGoroutine()
	s := NewSender(c, 3, echo)
	if got, err := s.Do(t.Context(), echo, nil, "x").Text(); err != nil || got != "x" {
		t.Fatalf("Do = %q, %v", got, err)
	}
	s.Close()
	s.Close() // idempotent
	// A goroutine Close waited for may take a moment more to exit.
	n := runtime.NumGoroutine()
	for deadline := time.Now().Add(time.Second); n > before && time.Now().Before(deadline); n = runtime.NumGoroutine() {
		time.Sleep(time.Millisecond)
	}
	if n > before {
		t.Errorf("%d goroutines after Close, %d before NewSender", n, before)
	}
	if err := s.Do(t.Context(), echo, nil, "y").Err(); !errors.Is(err, driver.ErrClosed) {
		t.Fatalf("Do after Close = %v, want ErrClosed", err)
	}
}

func BenchmarkDo(b *testing.B) {
	c := testenv.RedisClient(b)
	s := NewSender(c, 4, echo)
	defer s.Close()
	ctx := context.Background()
	b.ReportAllocs()
	b.SetParallelism(8)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := s.Do(ctx, echo, nil, "x").Err(); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// Submit racing with Close never sends on the closed wake channel: every
// call gets an answer (its result or ErrClosed) and nothing panics.
func TestSubmitRacingClose(t *testing.T) {
	c := testenv.RedisClient(t)
	for range 20 {
		s := NewSender(c, 2, echo)
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Go(func() {
				err := s.Do(t.Context(), echo, nil, i).Err()
				if err != nil && !errors.Is(err, driver.ErrClosed) {
					t.Errorf("Do = %v", err)
				}
			})
		}
		s.Close()
		wg.Wait()
	}
}

// blackHole listens on loopback, accepts connections and never answers.
// Its cleanup closes the listener and every connection.
func blackHole(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	return ln.Addr().String()
}

// A call queued behind one on the wire returns when its context ends, even
// when the server stopped answering: not after the client's ReadTimeout.
func TestQueuedDoReturnsWhenContextEnds(t *testing.T) {
	addr := blackHole(t)
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ReadTimeout: 2 * time.Second})
	defer c.Close()
	s := NewSender(c, 1, echo)
	defer s.Close()

	// The first call goes out alone, from its caller, and hangs.
	first := make(chan error, 1)
	go func() { first <- s.Do(context.Background(), echo, nil, "first").Err() }()
	for deadline := time.Now().Add(5 * time.Second); ; {
		s.mu.Lock()
		busy := s.busy
		s.mu.Unlock()
		if busy == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the first call never went out")
		}
		time.Sleep(time.Millisecond)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := s.Do(ctx, echo, nil, "x").Err()
	took := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("queued Do against a silent server = %v, want DeadlineExceeded", err)
	}
	if took > time.Second {
		t.Errorf("queued Do returned after %v, want about the context's 100ms", took)
	}
	if err := <-first; err == nil {
		t.Error("the first call against a silent server succeeded")
	}
}

// A call sent by its caller against a server that stopped answering ends
// at the client's own bound: the context's deadline when the client has
// ContextTimeoutEnabled.
func TestDirectDoHonoursContextTimeout(t *testing.T) {
	addr := blackHole(t)
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true})
	defer c.Close()
	s := NewSender(c, 1, echo)
	defer s.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := s.Do(ctx, echo, nil, "x").Err()
	took := time.Since(start)
	if err == nil {
		t.Error("Do against a silent server succeeded")
	}
	if took > time.Second {
		t.Errorf("Do returned after %v, want about the context's 100ms", took)
	}
}

// senderStacks counts the commands go-redis was given on one of a
// Sender's own goroutines, on a goroutine started for a lone call, and on
// the caller's.
type senderStacks struct{ fromSender, fromAlone, total atomic.Int64 }

func (h *senderStacks) reset() {
	h.fromSender.Store(0)
	h.fromAlone.Store(0)
	h.total.Store(0)
}

func (h *senderStacks) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *senderStacks) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() != "evalsha" { // not a connection's handshake
			return next(ctx, cmd)
		}
		h.total.Add(1)
		buf := make([]byte, 8<<10)
		stack := string(buf[:runtime.Stack(buf, false)])
		switch {
		case strings.Contains(stack, "redispipe.(*Sender).run"):
			h.fromSender.Add(1)
		case strings.Contains(stack, "redispipe.(*Sender).sendAlone"):
			h.fromAlone.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (h *senderStacks) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// An uncontended call is sent by its caller when that cannot outlast the
// caller's context; a call made while another is on the wire is handed
// over.
func TestLoneCallIsSentByItsCaller(t *testing.T) {
	c := testenv.RedisClient(t)
	slow := NewScript(`local t = redis.call('TIME'); local s = t[1] * 1e6 + t[2]
repeat local n = redis.call('TIME') until n[1] * 1e6 + n[2] - s > 200000
return 1`)
	for _, sc := range []*Script{echo, slow} {
		if err := sc.Load(t.Context(), c).Err(); err != nil {
			t.Fatal(err)
		}
	}
	h := &senderStacks{}
	c.AddHook(h)
	s := NewSender(c, 1, echo)
	defer s.Close()
	for i := range 100 {
		if got, err := s.Do(context.Background(), echo, nil, i).Int(); err != nil || got != i {
			t.Fatalf("Do = %v, %v; want %d", got, err, i)
		}
	}
	if h.total.Load() != 100 || h.fromSender.Load() != 0 || h.fromAlone.Load() != 0 {
		t.Errorf("lone calls: %d commands, %d of them from the Sender's goroutines, %d from goroutines of their own; want 100, 0, 0",
			h.total.Load(), h.fromSender.Load(), h.fromAlone.Load())
	}

	// Hold the wire with a slow call; the next one must be handed over.
	s2 := NewSender(c, 1, slow, echo)
	defer s2.Close()
	h.reset()
	done := make(chan error, 1)
	go func() { done <- s2.Do(t.Context(), slow, nil).Err() }()
	for {
		s2.mu.Lock()
		busy := s2.busy
		s2.mu.Unlock()
		if busy == 1 {
			break
		}
		time.Sleep(100 * time.Microsecond)
	}
	if err := s2.Do(t.Context(), echo, nil, 1).Err(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if h.fromSender.Load() != 1 {
		t.Errorf("a call made while another was on the wire: %d sent by the Sender's goroutine, want 1", h.fromSender.Load())
	}
}

// Each lone call sent by its caller starts one goroutine as it goes out
// (wakeSpare), and only one.
func TestLoneCallWakesASpareThread(t *testing.T) {
	c := testenv.RedisClient(t)
	if err := echo.Load(t.Context(), c).Err(); err != nil {
		t.Fatal(err)
	}
	s := NewSender(c, 1, echo)
	defer s.Close()
	// Warm the connection pool, so that no dial runs during the count.
	if err := s.Do(t.Context(), echo, nil, 0).Err(); err != nil {
		t.Fatal(err)
	}
	sample := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	created := func() uint64 {
		metrics.Read(sample)
		return sample[0].Value.Uint64()
	}
	const calls = 200
	before := created()
	for i := range calls {
		if err := s.Do(context.Background(), echo, nil, i).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// The test's runtime may start a few goroutines of its own meanwhile.
	if n := created() - before; n < calls || n > calls+20 {
		t.Errorf("%d lone calls started %d goroutines, want one each", calls, n)
	}
}

// Who sends a lone call depends on whether a go-redis call on the caller's
// goroutine could outlast the caller's context.
func TestLoneCallPathFollowsContext(t *testing.T) {
	deadline := func() context.Context {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		t.Cleanup(cancel)
		return ctx
	}
	cancellable := func() context.Context {
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		return ctx
	}
	tests := []struct {
		name      string
		ctxBounds bool // client with ContextTimeoutEnabled
		ctx       context.Context
		byCaller  bool
	}{
		{"background", false, context.Background(), true},
		{"deadline, client ignores it", false, deadline(), false},
		{"deadline, client bounds I/O by it", true, deadline(), true},
		{"cancel only", false, cancellable(), false},
		{"cancel only, client bounds I/O by deadlines", true, cancellable(), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t), ContextTimeoutEnabled: tt.ctxBounds})
			defer c.Close()
			h := &senderStacks{}
			c.AddHook(h)
			s := NewSender(c, 1, echo)
			defer s.Close()
			for i := range 20 {
				if got, err := s.Do(tt.ctx, echo, nil, i).Int(); err != nil || got != i {
					t.Fatalf("Do = %v, %v; want %d", got, err, i)
				}
			}
			alone := int64(20)
			if tt.byCaller {
				alone = 0
			}
			if h.total.Load() != 20 || h.fromSender.Load() != 0 || h.fromAlone.Load() != alone {
				t.Errorf("%d calls: %d from the Sender's goroutines, %d from goroutines of their own; want 20, 0, %d",
					h.total.Load(), h.fromSender.Load(), h.fromAlone.Load(), alone)
			}
		})
	}
}

// A lone call returns when its context ends even on a client that does
// not bound socket I/O by contexts, before the client's read timeout.
func TestLoneDoReturnsWhenContextEnds(t *testing.T) {
	addr := blackHole(t)
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ReadTimeout: time.Second})
	defer c.Close()
	s := NewSender(c, 1, echo)
	defer s.Close()
	for _, cancelOnly := range []bool{false, true} {
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		if cancelOnly {
			ctx, cancel = context.WithCancel(t.Context())
			time.AfterFunc(100*time.Millisecond, cancel)
		}
		start := time.Now()
		err := s.Do(ctx, echo, nil, "x").Err()
		took := time.Since(start)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
			t.Errorf("cancel only %v: Do against a silent server = %v, want the context's error", cancelOnly, err)
		}
		if took > 600*time.Millisecond {
			t.Errorf("cancel only %v: Do returned after %v, want about the context's 100ms (the read timeout is 1s)", cancelOnly, took)
		}
		// Let the abandoned call time out, so that the next one is lone.
		time.Sleep(1200 * time.Millisecond)
	}
}
