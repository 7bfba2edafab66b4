package natslock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/internal/bg"
)

// Defaults of Options.
const (
	// DefaultBucket is the KV bucket the driver uses.
	DefaultBucket = "dlock"
	// DefaultMarkerTTL is how long a bucket the driver creates keeps the
	// marker the server leaves where a key's TTL ran out, and how long a
	// release's marker stays.
	DefaultMarkerTTL = time.Minute
	// DefaultRequestTimeout bounds each request to the server.
	DefaultRequestTimeout = 2 * time.Second
)

// Options configure a Driver. The zero value, like a nil *Options, means
// every default. NewDriver copies them: later changes have no effect.
type Options struct {
	// Bucket is the JetStream KV bucket that holds the locks, the same
	// for every client that must exclude another; NewDriver creates it
	// (with Replicas, Storage and MarkerTTL) if it does not exist.
	// Default DefaultBucket.
	Bucket string

	// Replicas is the number of servers that store a bucket the driver
	// creates: 1 by default; 3 (or 5) on a cluster, so that the locks
	// survive the loss of a minority of its servers. It has no effect on
	// a bucket that exists.
	Replicas int

	// Storage is where a bucket the driver creates keeps its messages:
	// jetstream.FileStorage (the zero value, the default), so that the
	// stream's sequence, and with it the fencing tokens, survive a
	// restart of the servers; or jetstream.MemoryStorage, whose sequence
	// starts again from 1 when they all restart, which breaks the tokens'
	// promise. It has no effect on a bucket that exists.
	Storage jetstream.StorageType

	// MarkerTTL is how long the marker of a key removed by its TTL stays
	// in a bucket the driver creates (its LimitMarkerTTL), and the marker
	// a release leaves in any bucket. Waiters watch for markers; a name
	// nobody uses leaves nothing once its marker is gone. At least one
	// second; zero means DefaultMarkerTTL.
	MarkerTTL time.Duration

	// NoCreate makes NewDriver fail, with an error matching
	// jetstream.ErrBucketNotFound, when the bucket does not exist, instead
	// of creating it (dlock doctor opens so, to write nothing).
	NoCreate bool

	// RequestTimeout bounds each request (within the caller's context),
	// so that a publish to a stream whose leader just died, which gets no
	// answer, is retried or reported in time. Zero or negative means
	// DefaultRequestTimeout.
	RequestTimeout time.Duration
}

// Driver is the NATS JetStream driver: a dlock driver.Driver,
// driver.Waiter, driver.Moder (mutex, semaphore, election),
// driver.Elector, driver.Resumer and driver.Inspector over a JetStream
// KV bucket. Create it with NewDriver (or New, NewConn, or dlock.Open
// with a nats:// URL).
//
// Each call makes its requests on the caller's goroutine. A waiting Lock
// holds a KV watch (an ordered consumer) on its lock's keys while it
// waits, and an Observe one on its election's key while its context
// lives. A Driver is safe for concurrent use by multiple goroutines. It
// must not be copied.
type Driver struct {
	js         jetstream.JetStream
	kv         jetstream.KeyValue
	stream     jetstream.Stream
	nc         *nats.Conn // closed by Close when the driver opened it
	bucket     string
	subjects   string // "$KV.<bucket>.", before every key's subject
	msgGet     string // the API subject of message gets of the bucket's stream
	reqTimeout time.Duration
	markerTTL  string // a release marker's Nats-TTL header

	holds holds
	marks marks
	gates gates

	closed    atomic.Bool
	done      chan struct{}
	closeOnce sync.Once
	// bg counts the clean-ups and the observers, for Close to wait for (at
	// most closeWait); unlike a WaitGroup, whose Add after a look at
	// closed could race Close's Wait, it counts nothing once Close waits.
	bg bg.Group
}

// NewDriver returns a driver over js, a JetStream context of the
// caller's (whose connection the driver does not close), with the options
// o (nil means the defaults). It binds the bucket, or creates it if it
// does not exist, within ctx. It fails when the server is older than
// 2.11 (no per-key TTLs), or when the bucket exists without per-key TTLs
// (created without LimitMarkerTTL).
//
// js must address its account's own JetStream: a context with a domain or
// an API prefix of its own is not supported.
func NewDriver(ctx context.Context, js jetstream.JetStream, o *Options) (*Driver, error) {
	if js == nil {
		panic("natslock: NewDriver with a nil JetStream")
	}
	opt := *cmp.Or(o, new(Options))
	if opt.Bucket == "" {
		opt.Bucket = DefaultBucket
	}
	if opt.MarkerTTL == 0 {
		opt.MarkerTTL = DefaultMarkerTTL
	}
	if opt.MarkerTTL < time.Second {
		return nil, fmt.Errorf("natslock: MarkerTTL %v is below one second, the server's least", opt.MarkerTTL)
	}
	if opt.RequestTimeout <= 0 {
		opt.RequestTimeout = DefaultRequestTimeout
	}
	if opt.Replicas <= 0 {
		opt.Replicas = 1
	}
	d := &Driver{
		js:         js,
		bucket:     opt.Bucket,
		subjects:   "$KV." + opt.Bucket + ".",
		msgGet:     "$JS.API.STREAM.MSG.GET.KV_" + opt.Bucket,
		reqTimeout: opt.RequestTimeout,
		markerTTL:  strconv.FormatInt(int64(storeTTL(opt.MarkerTTL)/time.Second), 10),
		done:       make(chan struct{}),
	}
	d.marks.max = maxMarks
	d.gates.Discard = discardHandover
	if err := checkServer(js.Conn()); err != nil {
		return nil, err
	}
	if err := d.bind(ctx, opt); err != nil {
		return nil, err
	}
	return d, nil
}

// checkServer refuses a server older than 2.11 (no per-message TTLs).
func checkServer(nc *nats.Conn) error {
	v := nc.ConnectedServerVersion()
	major, minor, ok := parseVersion(v)
	if ok && (major < 2 || major == 2 && minor < 11) {
		return fmt.Errorf("natslock: nats-server %s at %s has no per-key TTL: dlock needs 2.11 or later", v, nc.ConnectedUrlRedacted())
	}
	return nil
}

// parseVersion reads the major and minor numbers of a server version
// ("2.11.4", "v2.12.0-beta").
func parseVersion(v string) (major, minor int, ok bool) {
	n, _ := fmt.Sscanf(strings.TrimPrefix(v, "v"), "%d.%d", &major, &minor)
	return major, minor, n == 2
}

// bindTimeout bounds NewDriver's requests, within its context: a server
// answers nothing to a request it may not serve.
const bindTimeout = 10 * time.Second

// bind finds the bucket, creating it if it does not exist, and checks
// that it keeps per-key TTLs.
func (d *Driver) bind(ctx context.Context, opt Options) error {
	ctx, cancel := context.WithTimeout(ctx, bindTimeout)
	defer cancel()
	kv, err := d.js.KeyValue(ctx, opt.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) && opt.NoCreate {
		return fmt.Errorf("natslock: bucket %q does not exist, and create=false (Options.NoCreate) keeps the driver from creating it: %w", opt.Bucket, err)
	}
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = d.js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket:         opt.Bucket,
			Description:    "dlock's locks (github.com/dlockgo/dlock/natslock)",
			Replicas:       opt.Replicas,
			Storage:        opt.Storage,
			LimitMarkerTTL: storeTTL(opt.MarkerTTL),
		})
		if errors.Is(err, jetstream.ErrBucketExists) {
			// Another client created it meanwhile, differently.
			kv, err = d.js.KeyValue(ctx, opt.Bucket)
		}
	}
	if err != nil {
		return fmt.Errorf("natslock: bucket %q: %w", opt.Bucket, err)
	}
	stream, err := d.js.Stream(ctx, "KV_"+opt.Bucket)
	if err != nil {
		return fmt.Errorf("natslock: bucket %q: its stream: %w", opt.Bucket, err)
	}
	cfg := stream.CachedInfo().Config
	if !cfg.AllowMsgTTL || cfg.SubjectDeleteMarkerTTL <= 0 {
		return fmt.Errorf("natslock: bucket %q has no per-key TTL: create it with a limit marker TTL "+
			"(KeyValueConfig.LimitMarkerTTL, or `nats kv add --marker-ttl 1m`), or let natslock create it", opt.Bucket)
	}
	d.kv, d.stream = kv, stream
	return nil
}

// New returns a dlock.Locker over NewDriver(ctx, js, o), with the Locker
// options opts. Closing the Locker closes the driver but not js's
// connection.
func New(ctx context.Context, js jetstream.JetStream, o *Options, opts ...dlock.Option) (*dlock.Locker, error) {
	d, err := NewDriver(ctx, js, o)
	if err != nil {
		return nil, err
	}
	return dlock.New(d, opts...)
}

// NewConn is New over a JetStream context of nc, the caller's connection
// (which Close does not close).
func NewConn(ctx context.Context, nc *nats.Conn, o *Options, opts ...dlock.Option) (*dlock.Locker, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("natslock: %w", err)
	}
	return New(ctx, js, o, opts...)
}

// Scheme returns "nats", the backend's name in metrics and logs.
func (d *Driver) Scheme() string { return "nats" }

// Bucket returns the name of the KV bucket that holds the locks.
func (d *Driver) Bucket() string { return d.bucket }

// KeyValue returns the bucket the driver uses.
func (d *Driver) KeyValue() jetstream.KeyValue { return d.kv }

// Close ends the driver's waiting calls and observers, waits at most 5 s
// for its background clean-ups (see Lock; beyond, it returns an error),
// and closes the connection if the driver opened it from a URL. Locks
// still held stay on the server until their TTL runs out. Close is
// idempotent.
func (d *Driver) Close() error {
	var err error
	d.closeOnce.Do(func() {
		d.closed.Store(true)
		close(d.done)
		if !d.bg.Wait(closeWait) {
			err = fmt.Errorf("natslock: close: the driver's background work (a clean-up of a key) did not end within %v", closeWait)
		}
		if d.nc != nil {
			d.nc.Close()
		}
	})
	return err
}

// closeWait bounds Close's wait for the clean-ups, each of which ends
// with its request under way once the driver closes.
const closeWait = 5 * time.Second

var (
	_ driver.Driver      = (*Driver)(nil)
	_ driver.Waiter      = (*Driver)(nil)
	_ driver.Moder       = (*Driver)(nil)
	_ driver.Unsupporter = (*Driver)(nil)
	_ driver.Elector     = (*Driver)(nil)
	_ driver.Resumer     = (*Driver)(nil)
	_ driver.Inspector   = (*Driver)(nil)
	_ driver.Schemer     = (*Driver)(nil)
)
