package redlock

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/internal/redispipe"
)

// call is one script call fanned out to several nodes, each node's
// submission tagged with its index. Its Ctx ends at the fan-out's deadline
// (which bounds the requests' socket I/O too): a node that has not sent
// the request by then drops it. The channel has room for a reply from
// every node, so a node never blocks on a caller that stopped waiting. The
// last node to answer releases ctx.
type call struct {
	redispipe.Call
	ctx     context.Context
	cancel  context.CancelFunc
	left    atomic.Int32 // nodes yet to answer
	replies chan reply
}

// Answer delivers one node's reply. A request dropped unsent because its
// deadline passed counts as a node timeout.
func (c *call) Answer(node int, cmd *redis.Cmd) {
	v, err := cmd.Result()
	if errors.Is(err, context.DeadlineExceeded) && c.ctx.Err() != nil {
		err = errNodeTimeout
	}
	c.replies <- reply{node: node, val: v, err: err}
	if c.left.Add(-1) == 0 {
		c.cancel()
	}
}

// reply is one node's answer to one script call.
type reply struct {
	node int
	val  any
	err  error
}

var (
	// errNodeTimeout marks a node that did not answer within the node
	// timeout.
	errNodeTimeout = errors.New("no answer within the node timeout")
	// errSkipped marks a node the request was not sent to.
	errSkipped = errors.New("not asked")
	// errUnexpected marks a reply the scripts never give.
	errUnexpected = errors.New("unexpected reply")
)

// all returns the mask of every node.
func (d *Driver) all() uint64 { return ^uint64(0) >> (64 - len(d.nodes)) }

// until says when a fan-out may stop waiting for the remaining nodes.
type until int

const (
	// allAnswer waits for every node (or the timeout).
	allAnswer until = iota
	// quorumOnes stops once a quorum answered 1 (done).
	quorumOnes
	// quorumSame stops once a quorum answered the same integer (a phase 1
	// whose token needs no phase 2), unless integers differ.
	quorumSame
)

// fanout runs script on every node in mask at once and returns each
// node's reply in node order. It returns when all have answered, when
// enough have (see until), or when timeout (or ctx) ends: nodes that have
// not answered by then get errNodeTimeout (or ctx's error). Their
// requests go on in the background, bounded by the timeout, and their
// replies go into a buffered channel that nobody reads any more. Each
// node runs its requests in order, so a later request of this Driver to
// the same node (such as an undo) comes after them.
//
// All nodes share one deadline: they are asked at the same instant.
func (d *Driver) fanout(ctx context.Context, timeout time.Duration, stop until, script *script, mask uint64, keys []string, args ...any) []reply {
	deadline := time.Now().Add(timeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	c := &call{replies: make(chan reply, len(d.nodes))}
	c.ctx, c.cancel = context.WithDeadline(context.Background(), deadline)
	c.Call = redispipe.Call{Script: script, Keys: keys, Args: args, Ctx: c.ctx, To: c}
	out := make([]reply, len(d.nodes))
	pending := 0
	for i := range d.nodes {
		out[i] = reply{node: i, err: errSkipped}
		if mask&(1<<i) != 0 {
			out[i].err = errNodeTimeout
			pending++
		}
	}
	if pending == 0 {
		c.cancel()
		return out
	}
	c.left.Store(int32(pending))
	for i, n := range d.nodes {
		if mask&(1<<i) != 0 {
			n.Submit(&c.Call, i)
		}
	}
	var (
		ones, same int
		first      int64
		differ     bool
	)
	for ; pending > 0; pending-- {
		var r reply
		select {
		case r = <-c.replies:
		case <-c.ctx.Done():
			drain(c, out)
			return out
		case <-ctx.Done():
			drain(c, out)
			for i := range out {
				if out[i].err == errNodeTimeout {
					out[i].err = ctx.Err()
				}
			}
			return out
		}
		out[r.node] = r
		if r.err != nil {
			continue
		}
		if v, ok := r.val.(int64); ok {
			switch {
			case same == 0:
				first, same = v, 1
			case v == first:
				same++
			default:
				differ = true
			}
			if v == 1 {
				ones++
			}
		}
		if (stop == quorumOnes && ones >= d.quorum) || (stop == quorumSame && !differ && same >= d.quorum) {
			return out
		}
	}
	return out
}

// drain takes the replies already delivered.
func drain(c *call, out []reply) {
	for {
		select {
		case r := <-c.replies:
			out[r.node] = r
		default:
			return
		}
	}
}

// tally counts the replies of a script that answers 1 (done) or 0 (not
// ours) on each node.
type tally struct {
	yes, no, failed int
	firstErr        nodeErr // for the message
}

// nodeErr is a node's error, formatted only when it is reported.
type nodeErr struct {
	node int
	err  error
}

// wrap returns the error with its node, or nil.
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
