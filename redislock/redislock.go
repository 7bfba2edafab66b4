package redislock

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/internal/redisutil"
)

// Defaults of Options.
const (
	// DefaultPrefix starts every key and channel name the driver uses.
	DefaultPrefix = "dlock:"
	// DefaultQueueTTL is the longest a waiter's queue entry lives without
	// being renewed by its waiter.
	DefaultQueueTTL = 3 * time.Second
	// DefaultFenceTTL is how long a name's fencing counter is kept after
	// it was seeded.
	DefaultFenceTTL = 7 * 24 * time.Hour
)

// minQueueTTL is the shortest entry lifetime used for a short-TTL lock, so
// that a waiter's re-check arriving a little late does not drop it from
// the queue.
const minQueueTTL = 100 * time.Millisecond

// Options configure a Driver. The zero value, like a nil *Options, means
// every default. NewDriver copies them: later changes have no effect.
type Options struct {
	// Layout is how locks lie in Redis: LayoutDlock (the zero value) or
	// LayoutRedsync (see Layouts in docs/REDIS.md). NewDriver panics on
	// any other value.
	Layout Layout

	// Prefix starts every key and channel name, so that several
	// applications can share one Redis. It must not contain braces: the
	// lock's name in braces is the Redis Cluster hash tag. Default
	// DefaultPrefix. In LayoutRedsync it starts the lock keys only, and
	// is empty by default: the peers' keys are the bare names.
	Prefix string

	// QueueTTL bounds how long a waiter's queue entry lives unrenewed
	// (renews come every third of it or of the lock's TTL, the smaller).
	// A crashed waiter is skipped once its entry expires; a release before
	// then hands it the lock, unused until its TTL runs out: a smaller
	// QueueTTL narrows that window at the cost of more re-checks. The
	// lifetime used is min(QueueTTL, max(lock TTL, 100ms)). Zero or
	// negative means DefaultQueueTTL. LayoutRedsync ignores it.
	QueueTTL time.Duration

	// PollInterval is, in LayoutRedsync, the mean pause between a waiting
	// call's attempts while the lock is held, which bounds how long a
	// peer's release goes unseen (see Layouts in docs/REDIS.md). Zero or
	// negative means DefaultPollInterval. LayoutDlock ignores it.
	PollInterval time.Duration

	// FenceTTL is how long a name's fencing counter is kept after it was
	// seeded; acquisitions do not extend it (see Fencing tokens in
	// docs/REDIS.md). Zero or negative means DefaultFenceTTL.
	FenceTTL time.Duration

	// WaitReplicas is how many replicas must acknowledge every
	// acquisition and renewal (Redis WAIT) before it returns: without them
	// within WaitTimeout, an acquisition is released and a renewal fails,
	// both matching ErrNotReplicated (the lease keeps the validity of the
	// last acknowledged renewal). Zero, the default, means one where the
	// server has replicas and none where it has not: the Driver asks at
	// its first acquisition or renewal (INFO replication on the primary,
	// a Sentinel-managed one included; CLUSTER SLOTS on a Cluster), and
	// while the answer is none, again at the first one 10 s after the
	// last ask; once it waits, it keeps waiting. Negative turns the wait
	// off (URL wait_replicas=0). What the wait closes of the failover
	// race, and what it costs: see Sentinel in docs/REDIS.md.
	WaitReplicas int

	// WaitTimeout bounds the wait for replicas (WaitReplicas); it must stay
	// below the client's read timeout. Zero or negative means
	// DefaultWaitTimeout.
	WaitTimeout time.Duration

	// Logger receives the eviction warning, and at Debug why the check
	// could not run (see Eviction in docs/REDIS.md). Nil means
	// slog.Default(); a driver opened by dlock.Open uses the logger of
	// dlock.WithLogger. For go-redis's own logs see SlogLogger.
	Logger *slog.Logger
}

// Driver is the Redis driver: a dlock driver.Driver, driver.Waiter,
// driver.Moder (every mode) and driver.Elector over one Redis server (or
// Redis Cluster) reached through a go-redis client. Create it with
// NewDriver (or New, or dlock.Open with a redis:// URL). Each call sends
// its script on the caller's goroutine; the Driver holds pub/sub
// connections while it waits or observes (see docs/REDIS.md, Requests,
// Waiting and Cluster).
//
// A Driver is safe for concurrent use by multiple goroutines. It must not
// be copied.
type Driver struct {
	client    redis.UniversalClient
	ownClient bool // opened from a URL: Close closes it
	prefix    string
	queueTTL  time.Duration
	fenceTTL  any // milliseconds, boxed once
	channel   string

	format       *format       // the layout
	pollInterval time.Duration // in LayoutRedsync
	channelArg   any           // channel, boxed once

	mu        sync.Mutex // orders Close after Lock calls' enter
	closed    atomic.Bool
	done      chan struct{} // closed by Close
	closeOnce sync.Once
	active    sync.WaitGroup // Lock calls in progress

	// Subscriptions and the waiting calls grant messages are routed to
	// (see subscriber.go); ownReady is closed once ownOnce's subscription
	// to the Driver's own channel is confirmed.
	subs     subscriptions
	waiters  waiters
	ownOnce  sync.Once
	ownReady <-chan struct{}

	shardState   atomic.Int32             // shardUnknown, shardOn or shardOff (see useShards)
	waitReplicas atomic.Int64             // replicas to wait for; waitUnknown until asked (see replicasToWait)
	waitAsk      sync.Mutex               // held while the server is asked
	reask        *time.Timer              // forgets an answer of no replicas (see replicasToWait); guarded by mu
	reaskAfter   time.Duration            // replicaReask; shorter in tests
	log          *slog.Logger             // Options.Logger, or slog.Default()
	waitTimeout  int64                    // Options.WaitTimeout, in milliseconds
	lastTTL      atomic.Pointer[boxedTTL] // the script arguments of the last TTL used (see resolve)

	stopCheck context.CancelFunc // cancels the eviction check
	checking  sync.WaitGroup     // counts it, for Close to wait for

	sentinel *redis.FailoverOptions // a redis+sentinel:// URL's, for Diagnose; nil otherwise
}

// NewDriver returns a driver that uses client, with the options o (nil
// means the defaults). The caller keeps owning client and must not close it
// before the driver. NewDriver panics if client is nil. It makes no request
// itself: the eviction check (see Eviction in docs/REDIS.md) runs in the
// background, and Close waits for it.
func NewDriver(client redis.UniversalClient, o *Options) *Driver {
	d := buildDriver(client, o)
	d.startEvictionCheck(logger(o))
	return d
}

// buildDriver is NewDriver without the eviction check.
func buildDriver(client redis.UniversalClient, o *Options) *Driver {
	if client == nil {
		panic("redislock: NewDriver with a nil client")
	}
	opt := *cmp.Or(o, new(Options))
	f, err := formatOf(opt.Layout)
	if err != nil {
		panic("redislock: NewDriver with " + err.Error())
	}
	opt.Prefix = cmp.Or(opt.Prefix, f.prefix)
	var id [16]byte
	_, _ = rand.Read(id[:]) // crypto/rand.Read never fails since Go 1.24
	d := &Driver{
		client:   client,
		prefix:   opt.Prefix,
		queueTTL: redisutil.PositiveOr(opt.QueueTTL, DefaultQueueTTL),
		fenceTTL: max(redisutil.PositiveOr(opt.FenceTTL, DefaultFenceTTL).Milliseconds(), 1),
		channel:  opt.Prefix + "w:" + hex.EncodeToString(id[:]),
		done:     make(chan struct{}),

		format:       f,
		pollInterval: redisutil.PositiveOr(opt.PollInterval, DefaultPollInterval),
	}
	d.channelArg = d.channel
	d.log = logger(&opt)
	n, timeout := waitOptions(opt)
	d.waitReplicas.Store(n)
	d.waitTimeout, d.reaskAfter = timeout, replicaReask
	return d
}

// New returns a dlock.Locker over NewDriver(client, o), with the Locker
// options opts. Closing the Locker closes the driver but not client.
func New(client redis.UniversalClient, o *Options, opts ...dlock.Option) (*dlock.Locker, error) {
	return dlock.New(NewDriver(client, o), opts...)
}

// Scheme returns "redis", the backend's name in metrics and logs.
func (d *Driver) Scheme() string { return "redis" }

// Client returns the go-redis client the driver uses.
func (d *Driver) Client() redis.UniversalClient { return d.client }

// Close ends the driver: calls to Lock still waiting give up (leaving
// nothing queued) and return driver.ErrClosed, the pub/sub subscriptions are
// closed, and so is the client if the driver opened it from a URL. A
// client passed to NewDriver or New is left open. Close is idempotent.
func (d *Driver) Close() error {
	var err error
	d.closeOnce.Do(func() {
		d.mu.Lock()
		d.closed.Store(true)
		if d.reask != nil {
			d.reask.Stop()
		}
		d.mu.Unlock()
		close(d.done)
		if d.stopCheck != nil {
			d.stopCheck()
		}
		d.checking.Wait() // before the client may be closed
		d.active.Wait()
		d.subs.close()
		if d.ownClient {
			err = d.client.Close()
		}
	})
	return err
}

var (
	_ driver.Driver      = (*Driver)(nil)
	_ driver.Waiter      = (*Driver)(nil)
	_ driver.Moder       = (*Driver)(nil)
	_ driver.Elector     = (*Driver)(nil)
	_ driver.Inspector   = (*Driver)(nil)
	_ driver.Unsupporter = (*Driver)(nil)
	_ driver.Resumer     = (*Driver)(nil)
	_ driver.Schemer     = (*Driver)(nil)
)
