package redlock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/internal/gate"
	"github.com/dlockgo/dlock/internal/redisutil"
)

// Defaults and limits of Options.
const (
	// DefaultNodeTimeout is how long one node has to answer one request.
	DefaultNodeTimeout = 20 * time.Millisecond
	// MinNodeTimeout is the shortest Options.NodeTimeout.
	MinNodeTimeout = 5 * time.Millisecond
	// MaxNodeTimeout is the longest Options.NodeTimeout.
	MaxNodeTimeout = 50 * time.Millisecond

	// DefaultDrift is the fixed part of the clock-drift allowance; the
	// other part is DriftFactor of the TTL.
	DefaultDrift = 2 * time.Millisecond
	// DriftFactor is the share of the TTL allowed for the nodes' clocks
	// running at different rates from the client's: 1%.
	DriftFactor = 0.01

	// DefaultPrefix starts every key and the channel name the driver uses.
	// It differs from the redis backend's, so that the two never share
	// keys on one server.
	DefaultPrefix = "dlock:rl:"

	// DefaultFenceTTL is how long a name's fencing counter is kept on a
	// node after the last acquisition or renewal of its lock.
	DefaultFenceTTL = 7 * 24 * time.Hour

	// MaxNodes is the largest number of nodes a Driver takes.
	MaxNodes = 64
)

// releaseTimeoutFactor: deletes (Unlock, undo) wait this many node
// timeouts: nothing is timed against a TTL there, and a release lost to a
// slow moment would keep the lock until its TTL ends.
const releaseTimeoutFactor = 10

// Options configure a Driver. The zero value, like a nil *Options, means
// every default.
type Options struct {
	// NodeTimeout bounds each request to one node: a node that has not
	// answered by then counts as down for that request. Values outside
	// [MinNodeTimeout, MaxNodeTimeout] are clamped; zero means
	// DefaultNodeTimeout. It should be a few round trips: the longer it
	// is, the more of the TTL a slow node eats.
	NodeTimeout time.Duration

	// Drift is the fixed part of the clock-drift allowance: a lock's
	// validity is its TTL less DriftFactor of the TTL, less Drift. Zero
	// or negative means DefaultDrift.
	Drift time.Duration

	// Prefix starts every key and the release channel's name, so that
	// several applications can share the nodes. It must not contain
	// braces: the lock's name in braces is the Redis Cluster hash tag
	// that keeps a lock and its counter in one slot. Empty means
	// DefaultPrefix.
	Prefix string

	// NoFencing turns fencing tokens off: acquisitions are then one phase
	// always, and every token is 0. Only for users who cannot use tokens
	// and want to save the counters' keys and the rare second round trip.
	NoFencing bool

	// FenceTTL is how long a name's fencing counter is kept on a node
	// after the last acquisition or renewal. A counter that expired is
	// reseeded from the node's clock, which keeps tokens increasing (see
	// docs/REDLOCK.md). Zero or negative means DefaultFenceTTL.
	FenceTTL time.Duration

	// Logger receives the eviction warning, and at Debug the nodes that
	// could not be checked (see docs/REDLOCK.md, also for go-redis's own
	// logs). Nil means slog.Default(), so that the warning reaches someone;
	// dlock.Open passes the logger of dlock.WithLogger.
	Logger *slog.Logger
}

// Driver is the Redlock driver: a dlock driver.Driver and driver.Waiter
// that holds a lock on a quorum (N/2+1) of N independent Redis masters,
// with fencing tokens that strictly increase across acquisitions. Create
// it with NewDriver (or New, or dlock.Open with a redlock:// URL).
//
// A Driver is safe for concurrent use by multiple goroutines. It must not
// be copied.
type Driver struct {
	clients     []redis.UniversalClient
	nodes       []*node // one per client
	ownClients  bool    // opened from a URL: Close closes them
	quorum      int
	nodeTimeout time.Duration
	drift       time.Duration
	prefix      string
	fencing     bool
	fenceTTL    any // counter ttl in ms as the scripts take it, boxed once; "0" without fencing
	channel     string
	channelArg  any // channel, boxed once

	closed    atomic.Bool
	done      chan struct{} // closed by Close
	closeOnce sync.Once

	sub   subscriber
	gates gate.Set[struct{}] // one waiter per name on the nodes (Lock)

	stopCheck context.CancelFunc // cancels the eviction check
	checking  sync.WaitGroup     // counts it, for Close to wait for
}

// NewDriver returns a driver over the independent Redis masters clients,
// one client per node, with the options o (nil means the defaults). The
// clients must reach distinct servers: a server counted twice votes twice.
// The driver does not close the clients: the caller keeps owning them.
//
// Each request to a node is bounded by Options.NodeTimeout. Clients with
// ContextTimeoutEnabled, MaxRetries -1 and DialerRetries 1 are advisable
// (see docs/REDLOCK.md). The driver runs a sender goroutine per node, one
// per node for the release subscription once a Lock has had to wait, and
// at the start one that reads the nodes' maxmemory-policy (see
// Options.Logger). Close stops them.
func NewDriver(clients []redis.UniversalClient, o *Options) (*Driver, error) {
	if len(clients) == 0 {
		return nil, errors.New("redlock: NewDriver: no clients")
	}
	if len(clients) > MaxNodes {
		return nil, fmt.Errorf("redlock: NewDriver: %d clients, more than %d", len(clients), MaxNodes)
	}
	for i, c := range clients {
		if c == nil {
			return nil, fmt.Errorf("redlock: NewDriver: client %d is nil", i)
		}
	}
	opt := *cmp.Or(o, new(Options))
	opt.Prefix = cmp.Or(opt.Prefix, DefaultPrefix)
	if strings.ContainsAny(opt.Prefix, "{}") {
		return nil, fmt.Errorf("redlock: NewDriver: prefix %q contains a brace", opt.Prefix)
	}
	d := &Driver{
		clients:     append([]redis.UniversalClient(nil), clients...),
		quorum:      len(clients)/2 + 1,
		nodeTimeout: min(max(cmp.Or(opt.NodeTimeout, DefaultNodeTimeout), MinNodeTimeout), MaxNodeTimeout),
		drift:       redisutil.PositiveOr(opt.Drift, DefaultDrift),
		prefix:      opt.Prefix,
		fencing:     !opt.NoFencing,
		fenceTTL:    "0",
		channel:     opt.Prefix + "released",
		done:        make(chan struct{}),
	}
	d.channelArg = d.channel
	for i, c := range d.clients {
		d.nodes = append(d.nodes, newNode(i, c))
	}
	if d.fencing {
		d.fenceTTL = max(redisutil.PositiveOr(opt.FenceTTL, DefaultFenceTTL).Milliseconds(), 1)
	}
	d.sub.init(d)
	d.startEvictionCheck(cmp.Or(opt.Logger, slog.Default()))
	return d, nil
}

// New returns a dlock.Locker over NewDriver(clients, o), with the Locker
// options opts. Closing the Locker closes the driver but not the clients.
func New(clients []redis.UniversalClient, o *Options, opts ...dlock.Option) (*dlock.Locker, error) {
	d, err := NewDriver(clients, o)
	if err != nil {
		return nil, err
	}
	return dlock.New(d, opts...)
}

// Scheme returns "redlock", the backend's name in metrics and logs.
func (d *Driver) Scheme() string { return "redlock" }

// Nodes returns the number of nodes.
func (d *Driver) Nodes() int { return len(d.nodes) }

// Quorum returns how many nodes must agree: Nodes()/2+1.
func (d *Driver) Quorum() int { return d.quorum }

// Close ends the driver: calls to Lock still waiting return
// driver.ErrClosed, the release subscriptions are closed, and so are the
// clients if the driver opened them from a URL. Clients passed to
// NewDriver or New are left open. Locks still held are not released (the
// Locker releases its leases before it closes the driver). Close is
// idempotent.
func (d *Driver) Close() error {
	var err error
	d.closeOnce.Do(func() {
		d.closed.Store(true)
		close(d.done)
		d.stopCheck()
		d.checking.Wait() // before the clients may be closed
		d.sub.close()
		for _, n := range d.nodes {
			n.close()
		}
		if d.ownClients {
			errs := make([]error, 0, len(d.clients))
			for _, c := range d.clients {
				errs = append(errs, c.Close())
			}
			err = errors.Join(errs...)
		}
	})
	return err
}

var (
	_ driver.Driver    = (*Driver)(nil)
	_ driver.Waiter    = (*Driver)(nil)
	_ driver.Schemer   = (*Driver)(nil)
	_ driver.Resumer   = (*Driver)(nil)
	_ driver.Inspector = (*Driver)(nil)
)

// Prepare connects to every node and loads the driver's scripts there, all
// nodes at once, so that the first lock operations do not pay for both
// within the node timeout (without it, the first request to each node does
// that work). The error wraps driver.ErrNoQuorum when fewer than a quorum
// of nodes could be prepared before ctx ended.
func (d *Driver) Prepare(ctx context.Context) error {
	if d.closed.Load() {
		return driver.ErrClosed
	}
	replies := make([]reply, len(d.clients))
	var wg sync.WaitGroup
	for i, c := range d.clients {
		wg.Go(func() {
			pipe := c.Pipeline()
			for _, sc := range allScripts {
				pipe.ScriptLoad(ctx, sc.Source())
			}
			_, err := pipe.Exec(ctx)
			replies[i] = reply{node: i, val: int64(1), err: err}
		})
	}
	wg.Wait()
	if t := count(replies); t.yes < d.quorum {
		return d.noQuorum("prepare", "", t.yes, "prepared", t.firstErr)
	}
	return nil
}

// startEvictionCheck warns once on log of the nodes whose maxmemory-policy
// may evict lock keys (see the warning for why). It runs in the background,
// as a driver opens with its nodes unreached (some may be down); a node not
// read within redisutil.CheckTimeout, or refusing CONFIG, is logged at
// Debug. Close cancels the check and waits for it.
func (d *Driver) startEvictionCheck(log *slog.Logger) {
	ctx, cancel := context.WithCancel(context.Background())
	d.stopCheck = cancel
	d.checking.Add(1)
	go func() {
		defer d.checking.Done()
		defer cancel()
		risky := redisutil.Evicting(ctx, d.clients, redisutil.CheckTimeout, func(addr string, err error) {
			log.Debug("redlock: cannot read a node's maxmemory-policy; whether it may evict lock keys is not checked",
				"node", addr, "err", err)
		})
		if len(risky) > 0 {
			log.Warn(fmt.Sprintf("redlock: %d of %d nodes may evict lock keys: maxmemory-policy is %s; "+
				"an evicted lock key takes that node's vote from its holder unnoticed, and on a quorum frees the lock while the holder still believes it holds it; "+
				"set maxmemory-policy noeviction (CONFIG SET maxmemory-policy noeviction, and in redis.conf) on every node",
				len(risky), len(d.clients), strings.Join(risky, ", ")))
		}
	}()
}
