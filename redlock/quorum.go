package redlock

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/internal/redisutil"
)

// reply is one node's answer to one script call.
type reply struct {
	node int
	val  any
	err  error
}

var (
	errNodeTimeout = errors.New("no answer within the node timeout")
	errSkipped     = errors.New("not asked") // the request was not sent to the node
	errUnexpected  = errors.New("unexpected reply")
)

// all returns the mask of every node.
func (d *Driver) all() uint64 { return ^uint64(0) >> (64 - len(d.nodes)) }

// until says when a fan-out may stop waiting for the remaining nodes.
type until int

const (
	allAnswer  until = iota // every node (or the timeout)
	quorumOnes              // a quorum answered 1 (done)
	// quorumSame: a quorum answered the same integer (a phase 1 whose
	// token needs no phase 2), unless integers differ.
	quorumSame
)

// call is one script call fanned out to the nodes in mask, each getting
// the command line built once: EVALSHA sha 2 lock fence owner arg arg. The
// requests run under the call's timeout and the caller's context values,
// but not its cancellation: see fanout.
type call struct {
	quorum int
	stop   until
	ctx    context.Context // the caller's
	rctx   context.Context // the requests': the timeout, without ctx's cancellation
	cancel context.CancelFunc
	src    any // the script's source, for EVAL after NOSCRIPT
	argv   [8]any

	mu       sync.Mutex
	left     int     // nodes yet to answer
	out      []reply // by node; written until returned
	returned bool    // the caller has taken out
	ones     int     // replies of 1
	same     int     // replies equal to first
	first    int64
	differ   bool
	decided  bool          // done is closed
	done     chan struct{} // closed once the caller may stop waiting
}

// fanout runs script on the nodes in mask at once and returns their
// replies in node order once all (or enough, see until) have answered or
// timeout (or ctx) ends; the rest get errNodeTimeout (or ctx's error).
// Their requests go on in the background, bounded by timeout: cancelled
// with ctx, they would leave a node without the acquire or release its
// quorum got, a key that stays until its TTL. Each node runs its requests
// in order, so a later request to it (an undo) comes after.
func (d *Driver) fanout(ctx context.Context, timeout time.Duration, stop until, sc *redisutil.Script, mask uint64, t *target, a1, a2 any) []reply {
	c := &call{quorum: d.quorum, stop: stop, ctx: ctx, src: sc.Src, done: make(chan struct{})}
	c.argv = [8]any{"evalsha", sc.SHA, 2, t.lock, t.fence, t.owner, a1, a2}
	c.out = make([]reply, len(d.nodes))
	for i := range c.out {
		c.out[i] = reply{node: i, err: errSkipped}
		if mask&(1<<i) != 0 {
			c.out[i].err = errNodeTimeout
			c.left++
		}
	}
	if c.left == 0 {
		return c.out
	}
	c.rctx, c.cancel = context.WithTimeout(context.WithoutCancel(ctx), timeout)
	for i, n := range d.nodes {
		if mask&(1<<i) != 0 {
			n.submit(c)
		}
	}
	select {
	case <-c.done:
	case <-c.rctx.Done():
	case <-ctx.Done():
	}
	c.mu.Lock()
	c.returned = true
	c.mu.Unlock()
	if err := ctx.Err(); err != nil {
		for i := range c.out {
			if c.out[i].err == errNodeTimeout {
				c.out[i].err = err
			}
		}
	}
	return c.out
}

// answer takes node i's reply, and tells the caller once it has enough.
// The last node to answer releases the call's context.
func (c *call) answer(i int, val any, err error) {
	if err != nil && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)) {
		err = errNodeTimeout // a pipeline's deadline may pass before c.rctx's timer fires
		if e := c.ctx.Err(); e != nil {
			err = e
		}
	}
	c.mu.Lock()
	if !c.returned {
		c.out[i] = reply{node: i, val: val, err: err}
	}
	if v, ok := val.(int64); ok && err == nil {
		switch {
		case c.same == 0:
			c.first, c.same = v, 1
		case v == c.first:
			c.same++
		default:
			c.differ = true
		}
		if v == 1 {
			c.ones++
		}
	}
	c.left--
	last := c.left == 0
	if !c.decided && (last ||
		(c.stop == quorumOnes && c.ones >= c.quorum) ||
		(c.stop == quorumSame && !c.differ && c.same >= c.quorum)) {
		close(c.done)
		c.decided = true
	}
	c.mu.Unlock()
	if last {
		c.cancel()
	}
}

// node sends one node its requests, in order, from a goroutine of its
// own: the requests that arrive while a batch is on the wire go out
// together as the next batch, in one pipeline, which with many concurrent
// locks saves most system calls (BenchmarkParallelDistinct).
type node struct {
	i      int
	client redis.UniversalClient
	wake   chan struct{} // buffered: a submit never blocks
	exited chan struct{}

	mu     sync.Mutex
	closed bool
	queue  []*call
}

func newNode(i int, client redis.UniversalClient) *node {
	n := &node{i: i, client: client, wake: make(chan struct{}, 1), exited: make(chan struct{})}
	go n.run()
	return n
}

// submit queues c. After close, c is answered at once with
// driver.ErrClosed.
func (n *node) submit(c *call) {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		c.answer(n.i, nil, driver.ErrClosed)
		return
	}
	n.queue = append(n.queue, c)
	select { // under mu: close closes wake under mu
	case n.wake <- struct{}{}:
	default:
	}
	n.mu.Unlock()
}

// close stops the goroutine once the batch on the wire is done; the calls
// still queued are answered with driver.ErrClosed.
func (n *node) close() {
	n.mu.Lock()
	if !n.closed {
		n.closed = true
		close(n.wake)
	}
	n.mu.Unlock()
	<-n.exited
}

func (n *node) run() {
	defer close(n.exited)
	var batch []*call
	var cmds []*redis.Cmd
	for range n.wake {
		for {
			n.mu.Lock()
			batch, n.queue = n.queue, batch[:0]
			n.mu.Unlock()
			if len(batch) == 0 {
				break
			}
			cmds = n.send(batch, cmds[:0])
			clear(batch) // let the calls be collected
			clear(cmds)
		}
	}
	n.mu.Lock()
	batch, n.queue = n.queue, nil
	n.mu.Unlock()
	for _, c := range batch {
		c.answer(n.i, nil, driver.ErrClosed)
	}
}

// send runs a batch. Calls whose context is done are answered unsent: a
// request whose caller stopped waiting is dropped, not piled onto the
// node.
func (n *node) send(batch []*call, cmds []*redis.Cmd) []*redis.Cmd {
	live := batch[:0]
	for _, c := range batch {
		if err := c.rctx.Err(); err != nil {
			c.answer(n.i, nil, err)
			continue
		}
		live = append(live, c)
	}
	switch len(live) {
	case 0:
		return cmds
	case 1:
		c := live[0]
		cmd := n.client.Do(c.rctx, c.argv[:]...)
		if isNoScript(cmd.Err()) {
			argv := c.argv
			argv[0], argv[1] = "eval", c.src
			cmd = n.client.Do(c.rctx, argv[:]...)
		}
		v, err := cmd.Result()
		c.answer(n.i, v, err)
		return cmds
	}
	// A pipeline is bounded by the latest of its calls' deadlines and is
	// not cancelled with any one of them.
	var latest time.Time
	for _, c := range live {
		if dl, _ := c.rctx.Deadline(); dl.After(latest) {
			latest = dl
		}
	}
	ctx, cancel := context.WithDeadline(context.Background(), latest)
	defer cancel()
	pipe := n.client.Pipeline()
	for _, c := range live {
		cmds = append(cmds, pipe.Do(ctx, c.argv[:]...))
	}
	_, _ = pipe.Exec(ctx) // each command carries its own error
	again := false
	for k, c := range live {
		if isNoScript(cmds[k].Err()) {
			argv := c.argv
			argv[0], argv[1] = "eval", c.src
			cmds[k] = pipe.Do(ctx, argv[:]...)
			again = true
		}
	}
	if again {
		_, _ = pipe.Exec(ctx)
	}
	for k, c := range live {
		v, err := cmds[k].Result()
		c.answer(n.i, v, err)
	}
	return cmds
}

func isNoScript(err error) bool {
	return err != nil && redis.HasErrorPrefix(err, "NOSCRIPT")
}

// undo deletes the caller's key, owner-checked, on the nodes in mask and
// waits for the answers (for up to releaseTimeoutFactor node timeouts). It
// runs even when ctx was cancelled: an attempt given up must leave nothing
// behind. With notify, each node that deleted the key publishes the name.
func (d *Driver) undo(ctx context.Context, t *target, mask uint64, notify bool) {
	channel := any("")
	if notify {
		channel = d.channelArg
	}
	d.fanout(context.WithoutCancel(ctx), d.nodeTimeout*releaseTimeoutFactor, allAnswer, releaseScript, mask, t, channel, t.name)
}

// tally counts the replies of a script that answers 1 (done) or 0 (not
// ours) on each node.
type tally struct {
	yes, no, failed int
	firstErr        nodeErr
}

// nodeErr is a node's error, formatted only when it is reported.
type nodeErr struct {
	node int
	err  error
}

func (e nodeErr) wrap() error {
	if e.err == nil {
		return nil
	}
	return fmt.Errorf("node %d: %w", e.node, e.err)
}

func count(replies []reply) tally {
	var t tally
	for _, r := range replies {
		switch {
		case r.err == errSkipped:
		case r.err != nil:
			t.fail(r.node, r.err)
		case r.val == int64(1):
			t.yes++
		case r.val == int64(0):
			t.no++
		default:
			t.fail(r.node, errUnexpected)
		}
	}
	return t
}

func (t *tally) fail(node int, err error) {
	t.failed++
	if t.firstErr.err == nil {
		t.firstErr = nodeErr{node, err}
	}
}

// noQuorum is the error of a request that too few nodes answered (or
// confirmed, as what says), wrapping driver.ErrNoQuorum and the first
// node error.
func (d *Driver) noQuorum(op, name string, got int, what string, first nodeErr) error {
	if name != "" {
		op = fmt.Sprintf("%s %q", op, name)
	}
	if first.err == nil {
		return fmt.Errorf("redlock: %s: %w: %d of %d nodes %s, %d needed",
			op, driver.ErrNoQuorum, got, len(d.nodes), what, d.quorum)
	}
	return fmt.Errorf("redlock: %s: %w: %d of %d nodes %s, %d needed; %w",
		op, driver.ErrNoQuorum, got, len(d.nodes), what, d.quorum, first.wrap())
}

// The Lua scripts, one per request, so that each is one round trip and
// atomic on its node; run by EVALSHA, falling back to EVAL when the node
// lacks them (after a restart or a SCRIPT FLUSH).
var (
	//go:embed scripts/acquire.lua
	acquireLua string
	//go:embed scripts/fence.lua
	fenceLua string
	//go:embed scripts/renew.lua
	renewLua string
	//go:embed scripts/release.lua
	releaseLua string

	acquireScript = redisutil.NewScript(acquireLua)
	fenceScript   = redisutil.NewScript(fenceLua)
	renewScript   = redisutil.NewScript(renewLua)
	releaseScript = redisutil.NewScript(releaseLua)
)

// allScripts lists them, for Prepare to load them all into a node at once.
var allScripts = []*redisutil.Script{acquireScript, fenceScript, renewScript, releaseScript}
