package redlock

import (
	"context"
	"errors"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/internal/redisutil"
	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/locktest"
)

// cluster is N redis-servers of the test's own, without persistence, and
// an admin client per node for looking behind the driver's back.
type cluster struct {
	t       testing.TB
	servers []*testenv.RedisServer
	admin   []*redis.Client
}

func newCluster(t testing.TB, n int) *cluster {
	t.Helper()
	c := &cluster{t: t, servers: testenv.StartRedisN(t, n, testenv.RedisOptions{})}
	for _, s := range c.servers {
		a := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, DialerRetries: 1})
		t.Cleanup(func() { _ = a.Close() })
		c.admin = append(c.admin, a)
	}
	return c
}

// clients returns a new client per node, configured as the URL opener
// configures its own, closed when t ends.
func (c *cluster) clients(t testing.TB) []redis.UniversalClient {
	cs := make([]redis.UniversalClient, len(c.servers))
	for i, s := range c.servers {
		rc := redis.NewClient(&redis.Options{Addr: s.Addr, ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1})
		t.Cleanup(func() { _ = rc.Close() })
		cs[i] = rc
	}
	return cs
}

// testOptions are the options the tests use unless they need others: the
// longest node timeout, because the tests run under the race detector on
// a machine shared with other tests, where 20ms is sometimes too short.
func testOptions(o *Options) *Options {
	if o == nil {
		o = &Options{}
	}
	if o.NodeTimeout == 0 {
		o.NodeTimeout = MaxNodeTimeout
	}
	return o
}

// driver returns a new Driver over new clients, closed when t ends.
func (c *cluster) driver(t testing.TB, o *Options) *Driver {
	t.Helper()
	d, err := NewDriver(c.clients(t), testOptions(o))
	if err != nil {
		t.Fatalf("NewDriver: %v", err)
	}
	t.Cleanup(func() { _ = d.Close() })
	prepare(t, d)
	return d
}

// prepare connects the driver to its nodes and loads the scripts, so that
// the tests' first requests are not slowed by that (under the race
// detector on a loaded machine, dialing, the handshake and a first script
// run can take longer than the node timeout). Nodes that are down are
// skipped.
func prepare(t testing.TB, d *Driver) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := d.Prepare(ctx); err != nil {
		t.Logf("Prepare: %v", err)
	}
}

// locker returns a new Locker over new clients, closed when t ends.
func (c *cluster) locker(t testing.TB, o *Options, opts ...dlock.Option) *dlock.Locker {
	t.Helper()
	l := locktest.Opened(t)(New(c.clients(t), testOptions(o), opts...))
	prepare(t, l.Driver().(*Driver))
	return l
}

// owners returns the lock's value on each node ("" where absent, "?" where
// the node does not answer).
func (c *cluster) owners(name string) []string {
	c.t.Helper()
	key := DefaultPrefix + "{" + name + "}"
	out := make([]string, len(c.admin))
	for i, a := range c.admin {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		v, err := a.Get(ctx, key).Result()
		cancel()
		switch {
		case errors.Is(err, redis.Nil):
		case err != nil:
			out[i] = "?"
		default:
			out[i] = v
		}
	}
	return out
}

// drainBound is how long drain lets a node take to answer: it only proves
// that nothing hangs. The requests queued ahead of drain's wait at most
// releaseTimeoutFactor node timeouts (500ms in the tests) each, and a few
// milliseconds in practice.
const drainBound = 10 * time.Second

// ownersAfter returns owners(name) once every node has answered every
// request that the drivers ds sent it before the call (see drain): an
// Unlock returns once a quorum has deleted the lock, and the slower nodes'
// requests (the acquire and then the delete) follow. Nothing is timed: the
// answer is read at once.
func (c *cluster) ownersAfter(name string, ds ...*Driver) []string {
	c.t.Helper()
	for _, d := range ds {
		drain(c.t, d)
	}
	return c.owners(name)
}

// drain returns once each of d's nodes has answered every request d sent
// it before the call. Each node runs d's requests in order, so it waits
// for the answers to one more, sent to every node behind them: a renew
// of a key no one holds, which writes nothing. A node that is down
// answers with its error at once; one that does not answer within
// drainBound fails the test.
func drain(t testing.TB, d *Driver) {
	t.Helper()
	tg := target{lock: "dlock:test:drain", fence: "dlock:test:drain:fence", owner: "nobody"}
	for _, r := range d.fanout(context.Background(), drainBound, allAnswer, renewScript, d.all(), &tg, int64(1), "0") {
		if errors.Is(r.err, errNodeTimeout) {
			t.Fatalf("node %d did not answer within %v", r.node, drainBound)
		}
	}
}

// takeAway deletes the lock on every live node.
func (c *cluster) takeAway(t testing.TB, name string) {
	t.Helper()
	key := DefaultPrefix + "{" + name + "}"
	for i, a := range c.admin {
		if err := a.Del(context.Background(), key).Err(); err != nil {
			t.Logf("takeAway: node %d: %v", i, err)
		}
	}
}

// set stores a foreign owner's lock on the nodes listed.
func (c *cluster) set(t testing.TB, name, owner string, ttl time.Duration, nodes ...int) {
	t.Helper()
	key := DefaultPrefix + "{" + name + "}"
	for _, i := range nodes {
		if err := c.admin[i].Set(context.Background(), key, owner, ttl).Err(); err != nil {
			t.Fatalf("node %d: SET %s: %v", i, key, err)
		}
	}
}

// kill kills the listed nodes.
func (c *cluster) kill(nodes ...int) {
	for _, i := range nodes {
		c.servers[i].Kill()
	}
}

// start starts the listed nodes again (empty: no persistence).
func (c *cluster) start(nodes ...int) {
	for _, i := range nodes {
		c.servers[i].Start()
	}
}

// uniqueName returns a lock name unique to the test.
func uniqueName(prefix string) string { return prefix + "/" + locktest.RandomHex(4) }

// newOwner returns a random owner value, as dlock makes them.
func newOwner() string { return locktest.RandomHex(16) }

// count returns how many of the values equal v.
func countOf(vals []string, v string) int {
	n := 0
	for _, x := range vals {
		if x == v {
			n++
		}
	}
	return n
}

func TestMain(m *testing.M) {
	// go-redis logs every failed dial; the tests kill nodes on purpose.
	redis.SetLogger(quietLogger{})
	os.Exit(m.Run())
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// sendClock is a go-redis hook that records when the first command of a
// round was handed to a client: the earliest instant a node can have
// received it.
type sendClock struct {
	mu     sync.Mutex
	first  time.Time
	script string // the hash of the script whose requests count
}

// reset forgets the sends seen so far and counts from now on only the
// requests that run sc: requests of earlier calls still on their way to
// the slower nodes (an Unlock returns once a quorum has answered) must
// not count.
func (h *sendClock) reset(sc *redisutil.Script) {
	h.mu.Lock()
	h.first, h.script = time.Time{}, sc.Hash()
	h.mu.Unlock()
}

func (h *sendClock) earliest() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.first
}

func (h *sendClock) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *sendClock) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.see(time.Now(), cmd)
		return next(ctx, cmd)
	}
}

func (h *sendClock) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.see(time.Now(), cmds...)
		return next(ctx, cmds)
	}
}

func (h *sendClock) see(now time.Time, cmds ...redis.Cmder) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range cmds {
		if a := c.Args(); len(a) > 1 && a[1] == h.script {
			if h.first.IsZero() || now.Before(h.first) {
				h.first = now
			}
			return
		}
	}
}

// clockedDriver returns a Driver whose clients report to a sendClock.
func (c *cluster) clockedDriver(t testing.TB, o *Options) (*Driver, *sendClock) {
	t.Helper()
	h := &sendClock{}
	cs := c.clients(t)
	for _, rc := range cs {
		rc.AddHook(h)
	}
	d, err := NewDriver(cs, testOptions(o))
	if err != nil {
		t.Fatalf("NewDriver: %v", err)
	}
	t.Cleanup(func() { _ = d.Close() })
	prepare(t, d)
	return d, h
}

// TestConformance runs dlock's conformance suite over five redis-servers
// of the test's own; each Locker has its own clients, as another process
// would.
func TestConformance(t *testing.T) {
	c := newCluster(t, 5)
	locktest.Run(t, locktest.Harness{
		NewLocker: func(t *testing.T, opts ...dlock.Option) *dlock.Locker {
			return c.locker(t, nil, opts...)
		},
		TakeAway: func(t *testing.T, name string) { c.takeAway(t, name) },
	})
}
