// Package redispipe sends Lua script calls to one Redis client, coalescing
// the calls of concurrent goroutines into pipelines: one write and one read
// for many callers instead of one each. The Redis backends (redislock,
// redlock) use it for every hot request.
//
// A Sender has two ways to send. When nothing of its own is on the wire, a
// call of Do goes out alone, at once: sent by the caller itself, exactly as
// a direct go-redis call would, when that cannot outlast the caller's
// context (see Do), else by a goroutine of its own. A caller that sends
// its call itself pays no hand-over to another goroutine (on a small
// machine the hand-over there and back cost thread wake-ups worth about
// 17 µs per round trip of 50–60 µs, measured on a 2-vCPU VM; see
// docs/BENCHMARKS.md), and starts an empty goroutine as it sends, which on
// such VMs shortens the round trip itself (see wakeSpare). Calls that
// arrive while a call or batch is on the wire are queued and sent by a few
// long-lived goroutines, all those queued together as one pipeline:
// coalescing is what makes many concurrent lock operations cheap, since
// Redis answers a pipeline of k scripts with one read and one write system
// call instead of k of each, and the client needs one connection instead
// of k.
//
// The package also holds the other code both Redis backends need alike:
// ScanNames, the key scan behind their Inspect.
package redispipe

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock/driver"
)

// Script is a Lua script that keeps its source at hand, for loading it
// again after the server lost its script cache.
type Script struct {
	*redis.Script
	src string
}

// NewScript returns the script of Lua source src.
func NewScript(src string) *Script { return &Script{redis.NewScript(src), src} }

// Source returns the script's Lua source.
func (s *Script) Source() string { return s.src }

// Answerer receives the answers to a Call: one per submission, on the
// Sender's goroutine. Answer must not block.
type Answerer interface {
	Answer(tag int, cmd *redis.Cmd)
}

// Call is one script call. It may be submitted to several Senders (a
// fan-out), each submission with its own tag.
type Call struct {
	Script *Script
	Keys   []string
	Args   []any
	// Ctx bounds the call: a call whose Ctx is done before it is sent is
	// answered with Ctx's error, unsent, and, on a client with
	// ContextTimeoutEnabled, Ctx's deadline bounds the socket I/O of a
	// call sent alone. A call sent in a pipeline with others is bounded
	// by the latest of their deadlines (none if one of them has none);
	// cancelling Ctx does not interrupt a call already on the wire.
	Ctx context.Context
	// To receives the answers.
	To Answerer
}

type job struct {
	c   *Call
	tag int
}

// Sender sends calls to one client. A call of Do made while nothing is on
// the wire goes out alone, at once (see Do); the others are queued, and an idle
// goroutine of the Sender's takes every call queued and sends them as one
// batch; calls that arrive while all of them have a batch on the wire
// queue up and go out together as the next batch. Create it with
// NewSender; Close stops its goroutines.
type Sender struct {
	client  redis.UniversalClient
	scripts []*Script
	// ctxDeadlines: the client bounds socket I/O by a context's deadline.
	ctxDeadlines bool
	wake         chan struct{} // buffered: a submit never blocks
	running      sync.WaitGroup

	mu      sync.Mutex
	closed  bool
	pending []job
	busy    int // lone calls and batches on the wire now
}

// NewSender starts a sender to client with n goroutines (at least 1), so
// that up to n batches are on the wire at once. scripts are the scripts
// its calls use: when the server answers NOSCRIPT (it restarted, or its
// cache was flushed) all of them are loaded again and the calls resent.
func NewSender(client redis.UniversalClient, n int, scripts ...*Script) *Sender {
	s := &Sender{client: client, scripts: scripts, wake: make(chan struct{}, 1), ctxDeadlines: boundsIO(client)}
	n = max(n, 1)
	s.running.Add(n)
	for range n {
		go s.run()
	}
	return s
}

// Submit queues c under tag. After Close, c is answered at once with
// driver.ErrClosed.
func (s *Sender) Submit(c *Call, tag int) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		c.To.Answer(tag, errCmd(c, driver.ErrClosed))
		return
	}
	s.pending = append(s.pending, job{c, tag})
	// Still under mu: Close closes wake under mu, so it cannot be closed
	// between the check above and this send.
	select {
	case s.wake <- struct{}{}:
	default:
	}
	s.mu.Unlock()
}

// Close stops the sender: the batch on the wire completes, calls still
// queued are answered with driver.ErrClosed. Close waits for the goroutine
// to exit and is idempotent.
func (s *Sender) Close() {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		close(s.wake)
	}
	s.mu.Unlock()
	s.running.Wait()
}

func (s *Sender) run() {
	defer s.running.Done()
	var batch []job
	for range s.wake {
		for {
			s.mu.Lock()
			batch, s.pending = s.pending, batch[:0]
			if len(batch) > 0 {
				s.busy++
			}
			s.mu.Unlock()
			if len(batch) == 0 {
				break
			}
			s.send(batch)
			clear(batch) // let the calls be collected
			s.offWire()
		}
	}
	// Closed: answer what was queued after the last batch.
	s.mu.Lock()
	batch, s.pending = s.pending, nil
	s.mu.Unlock()
	for _, j := range batch {
		j.c.To.Answer(j.tag, errCmd(j.c, driver.ErrClosed))
	}
}

// send runs a batch. Calls whose Ctx is done are answered without being
// sent: under overload, stale work is dropped rather than piled onto the
// server.
func (s *Sender) send(batch []job) {
	live := batch[:0]
	for _, j := range batch {
		if err := j.c.Ctx.Err(); err != nil {
			j.c.To.Answer(j.tag, errCmd(j.c, err))
			continue
		}
		live = append(live, j)
	}
	switch len(live) {
	case 0:
		return
	case 1:
		j := live[0]
		j.c.To.Answer(j.tag, s.sendOne(j.c.Ctx, j.c.Script, j.c.Keys, j.c.Args))
		return
	}
	ctx, cancel := batchContext(live)
	defer cancel()
	cmds := make([]*redis.Cmd, len(live))
	pipe := s.client.Pipeline()
	for k, j := range live {
		cmds[k] = pipe.EvalSha(ctx, j.c.Script.Hash(), j.c.Keys, j.c.Args...)
	}
	_, _ = pipe.Exec(ctx) // each command carries its own error
	var again []int       // calls the server had no script for
	for k, cmd := range cmds {
		if isNoScript(cmd.Err()) {
			again = append(again, k)
		}
	}
	if len(again) > 0 {
		// Load every script, so that the cache is whole again and calls
		// of different scripts are not split between this round and the
		// next, then resend those calls, all in one pipeline.
		pipe := s.client.Pipeline()
		for _, sc := range s.scripts {
			pipe.ScriptLoad(ctx, sc.src)
		}
		for _, k := range again {
			j := live[k]
			cmds[k] = pipe.EvalSha(ctx, j.c.Script.Hash(), j.c.Keys, j.c.Args...)
		}
		_, _ = pipe.Exec(ctx)
	}
	for k, j := range live {
		j.c.To.Answer(j.tag, cmds[k])
	}
}

// sendOne sends one call, alone, loading the scripts again and resending
// it if the server had lost them.
func (s *Sender) sendOne(ctx context.Context, script *Script, keys []string, args []any) *redis.Cmd {
	cmd := script.EvalSha(ctx, s.client, keys, args...)
	if isNoScript(cmd.Err()) {
		s.reload(ctx)
		cmd = script.EvalSha(ctx, s.client, keys, args...)
	}
	return cmd
}

// reload loads every script into the server.
func (s *Sender) reload(ctx context.Context) {
	pipe := s.client.Pipeline()
	for _, sc := range s.scripts {
		pipe.ScriptLoad(ctx, sc.src)
	}
	_, _ = pipe.Exec(ctx)
}

// batchContext returns the context of a pipeline: no deadline if a call
// has none, else the latest of the calls' deadlines. It is not derived
// from any call's Ctx, so that one caller cancelling does not fail the
// others' calls.
func batchContext(live []job) (context.Context, context.CancelFunc) {
	var latest time.Time
	for _, j := range live {
		dl, ok := j.c.Ctx.Deadline()
		if !ok {
			return context.Background(), func() {}
		}
		if dl.After(latest) {
			latest = dl
		}
	}
	return context.WithDeadline(context.Background(), latest)
}

func isNoScript(err error) bool {
	return err != nil && redis.HasErrorPrefix(err, "NOSCRIPT")
}

// errCmd returns a command for c that failed with err.
func errCmd(c *Call, err error) *redis.Cmd {
	cmd := redis.NewCmd(c.Ctx)
	cmd.SetErr(err)
	return cmd
}

// Do sends one call through s and waits for its answer, like
// script.Run(ctx, client, keys, args...), batched with the calls of other
// goroutines when there are any. Do returns ctx's error as soon as ctx
// ends, whether or not the call was sent: its outcome is then unknown.
// A ctx already done when the call would go out stops it.
//
// When nothing of s's is on the wire the call goes out alone, at once.
// The caller sends it itself, with no hand-over to another goroutine,
// when that cannot outlast ctx: ctx can never end (its Done is nil, as
// for context.Background), or ctx has a deadline and the client bounds
// socket I/O by it (ContextTimeoutEnabled). A ctx cancelled before its
// deadline then ends Do when the reply comes or the deadline passes.
// Otherwise a new goroutine sends the call while the caller waits for
// the reply or for ctx to end. When a call or batch is on the wire, the
// call is queued for s's goroutines, which send all queued calls
// together as one pipeline.
func (s *Sender) Do(ctx context.Context, script *Script, keys []string, args ...any) *redis.Cmd {
	s.mu.Lock()
	if s.closed || s.busy > 0 || len(s.pending) > 0 {
		s.mu.Unlock()
		w := newWaiter(ctx, script, keys, args)
		s.Submit(&w.Call, 0)
		return w.wait(ctx)
	}
	s.busy++
	s.running.Add(1) // Close waits for the call (Add is ordered before Close by mu)
	s.mu.Unlock()
	if err := ctx.Err(); err != nil {
		s.offWire()
		s.running.Done()
		return errCmd(&Call{Ctx: ctx}, err)
	}
	if s.boundedBy(ctx) {
		wakeSpare()
		cmd := s.sendOne(ctx, script, keys, args)
		s.offWire()
		s.running.Done()
		return cmd
	}
	w := newWaiter(ctx, script, keys, args)
	go s.sendAlone(w)
	return w.wait(ctx)
}

// sendAlone sends w's call alone and answers it, for a caller that waits
// for the answer or for its context to end.
func (s *Sender) sendAlone(w *waiter) {
	defer s.running.Done() // Close waits for the answer too
	cmd := s.sendOne(w.Ctx, w.Script, w.Keys, w.Args)
	s.offWire() // before the answer: the caller's next call may go out alone too
	w.Answer(0, cmd)
}

// boundedBy reports whether a call sent with ctx by go-redis returns by
// the time ctx ends (or never has to).
func (s *Sender) boundedBy(ctx context.Context) bool {
	if ctx.Done() == nil {
		return true
	}
	_, ok := ctx.Deadline()
	return ok && s.ctxDeadlines
}

// boundsIO reports whether client bounds socket I/O by a context's
// deadline (go-redis's ContextTimeoutEnabled).
func boundsIO(client redis.UniversalClient) bool {
	switch c := client.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	case *redis.Ring:
		return c.Options().ContextTimeoutEnabled
	}
	return false
}

// offWire counts off a lone call or a batch that is no longer on the wire.
func (s *Sender) offWire() {
	s.mu.Lock()
	s.busy--
	s.mu.Unlock()
}

// wakeSpare starts an empty goroutine, so that the Go runtime wakes an idle
// thread (if a P is idle) just as the caller's request goes out.
//
// On a virtual machine whose idle vCPUs halt, a round trip during which
// every vCPU of the guest went idle pays for waking them again. On the
// 2-vCPU VM of docs/BENCHMARKS.md, a lone SET NX PX and script-delete
// pair took a median 112–115 µs that way, 37 µs while a goroutine kept a
// CPU busy, and 79–80 µs when each round trip started with this empty
// goroutine (bench/cmd/spawnprobe); dlock's acquire+release went from
// 125–128 to 67–73 µs (bench/cmd/interleave, one implementation). The
// woken thread finds nothing to do and sleeps again; the goroutine costs
// about a microsecond of CPU where a P was idle, less where none was.
// redsync, which runs every request on a goroutine of its own, gets the
// same effect. Keeping a CPU busy for the whole round trip would gain
// more but takes that CPU from everything else on the machine (the Redis
// server itself, on a small one) and, when the busy goroutine holds the
// P the reply needs, delays it by milliseconds; dlock does not do it.
func wakeSpare() { go func() {}() }

// waiter is a Call whose one answer goes to a channel; Do recycles them.
type waiter struct {
	Call
	ch chan *redis.Cmd
}

func (w *waiter) Answer(_ int, cmd *redis.Cmd) { w.ch <- cmd }

// newWaiter returns a waiter, from the pool, for the call.
func newWaiter(ctx context.Context, script *Script, keys []string, args []any) *waiter {
	w := waiters.Get().(*waiter)
	w.Script, w.Keys, w.Args, w.Ctx = script, keys, args, ctx
	return w
}

// wait returns w's answer, or ctx's error as soon as ctx ends. The call
// may still be sent and answered after that: its answer then goes into
// w's buffer, unread, and w is not reused.
func (w *waiter) wait(ctx context.Context) *redis.Cmd {
	select {
	case cmd := <-w.ch:
		w.Call = Call{To: w}
		waiters.Put(w)
		return cmd
	case <-ctx.Done():
		return errCmd(&Call{Ctx: ctx}, ctx.Err())
	}
}

var waiters = sync.Pool{New: func() any {
	w := &waiter{ch: make(chan *redis.Cmd, 1)}
	w.To = w
	return w
}}
