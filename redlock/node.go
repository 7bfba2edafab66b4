package redlock

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// call is one script call fanned out to several nodes: what to run, until
// when (ctx's deadline, which bounds the requests' socket I/O too), and
// where the replies go. The channel has room for a reply from every node,
// so a node never blocks on a caller that stopped waiting. The last node
// to answer releases ctx.
type call struct {
	script   *script
	keys     []string
	args     []any
	ctx      context.Context
	cancel   context.CancelFunc
	deadline time.Time
	left     atomic.Int32 // nodes yet to answer
	replies  chan reply
}

// answer delivers one node's reply.
func (c *call) answer(r reply) {
	c.replies <- r
	if c.left.Add(-1) == 0 {
		c.cancel()
	}
}

// job is a call's request to one node.
type job struct {
	c    *call
	node int
}

// node sends one node its requests. Requests that arrive while a batch is
// on the wire queue up and go out together as the next batch, in one
// pipeline: one write and one read for many callers instead of one each.
// A lone request goes out at once, alone. One long-lived goroutine per node
// does the sending, so a fan-out starts no goroutine and grows no stack.
type node struct {
	client redis.UniversalClient
	wake   chan struct{} // buffered: a submit never blocks
	done   <-chan struct{}

	mu      sync.Mutex
	pending []job
}

func newNode(c redis.UniversalClient, done <-chan struct{}) *node {
	return &node{client: c, wake: make(chan struct{}, 1), done: done}
}

// submit queues a request.
func (n *node) submit(j job) {
	n.mu.Lock()
	n.pending = append(n.pending, j)
	n.mu.Unlock()
	select {
	case n.wake <- struct{}{}:
	default:
	}
}

// run sends batches until done closes. Requests still queued then are
// answered with errClosed.
func (n *node) run(wg *sync.WaitGroup) {
	defer wg.Done()
	var batch []job
	for {
		select {
		case <-n.wake:
		case <-n.done:
			n.mu.Lock()
			batch, n.pending = n.pending, nil
			n.mu.Unlock()
			for _, j := range batch {
				j.c.answer(reply{node: j.node, err: errClosed})
			}
			return
		}
		for {
			n.mu.Lock()
			batch, n.pending = n.pending, batch[:0]
			n.mu.Unlock()
			if len(batch) == 0 {
				break
			}
			n.send(batch)
			clear(batch) // let the calls be collected
		}
	}
}

// send runs a batch. Requests whose caller has stopped waiting are
// answered without being sent: under overload, stale work is dropped
// rather than piled onto the node.
func (n *node) send(batch []job) {
	now := time.Now()
	live := batch[:0]
	var last *call // the call with the latest deadline
	for _, j := range batch {
		if !now.Before(j.c.deadline) {
			j.c.answer(reply{node: j.node, err: errNodeTimeout})
			continue
		}
		live = append(live, j)
		if last == nil || j.c.deadline.After(last.deadline) {
			last = j.c
		}
	}
	if len(live) == 0 {
		return
	}
	// The latest deadline bounds the batch (callers with earlier ones stop
	// waiting on their own); that call's ctx lives until its answer, which
	// is given last.
	ctx := last.ctx
	out := make([]reply, len(live))
	var again []int // requests the node had no script for
	if len(live) == 1 {
		j := live[0]
		v, err := j.c.script.EvalSha(ctx, n.client, j.c.keys, j.c.args...).Result()
		out[0] = reply{node: j.node, val: v, err: err}
	} else {
		pipe := n.client.Pipeline()
		cmds := make([]*redis.Cmd, len(live))
		for k, j := range live {
			cmds[k] = pipe.EvalSha(ctx, j.c.script.Hash(), j.c.keys, j.c.args...)
		}
		_, _ = pipe.Exec(ctx) // each command carries its own error
		for k, j := range live {
			v, err := cmds[k].Result()
			out[k] = reply{node: j.node, val: v, err: err}
		}
	}
	for k := range out {
		if out[k].err != nil && redis.HasErrorPrefix(out[k].err, "NOSCRIPT") {
			again = append(again, k)
		}
	}
	if len(again) > 0 {
		// The node restarted and lost its script cache. Load every
		// script, so that the cache is whole again and requests for
		// different scripts are not split between this round and the
		// next, then send those requests again, all in one pipeline.
		pipe := n.client.Pipeline()
		for _, sc := range allScripts {
			pipe.ScriptLoad(ctx, sc.src)
		}
		cmds := make([]*redis.Cmd, len(again))
		for i, k := range again {
			j := live[k]
			cmds[i] = pipe.EvalSha(ctx, j.c.script.Hash(), j.c.keys, j.c.args...)
		}
		_, _ = pipe.Exec(ctx)
		for i, k := range again {
			out[k].val, out[k].err = cmds[i].Result()
		}
	}
	lastK := 0
	for k, j := range live {
		if j.c == last {
			lastK = k
			continue
		}
		j.c.answer(out[k])
	}
	last.answer(out[lastK])
}
