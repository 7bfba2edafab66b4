package etcdlock

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/internal/tlsprobe"
)

// Defaults of Options and of etcd:// URLs.
const (
	// DefaultPrefix starts every key the driver writes.
	DefaultPrefix = "dlock"
	// DefaultEndpoint is the etcd an etcd:// URL without a host reaches.
	DefaultEndpoint = "127.0.0.1:2379"
	// DefaultDialTimeout bounds how long Open waits for an etcd member to
	// answer (URL parameter dial_timeout).
	DefaultDialTimeout = 5 * time.Second
	// DefaultRequestTimeout bounds each request to etcd before the driver
	// tries again (URL parameter request_timeout).
	DefaultRequestTimeout = time.Second
)

func init() {
	dlock.Register("etcd", open)
	dlock.Register("etcds", open)
}

// Options configure a Driver. The zero value, like a nil *Options, means
// every default.
type Options struct {
	// Prefix starts every key, so that several applications can share one
	// etcd cluster. Lockers that must exclude each other use the same
	// prefix and layout; unrelated Lockers' prefixes must not nest ("a"
	// and "a/b"), or names could meet. In LayoutDlock trailing slashes are
	// dropped and "" means DefaultPrefix; in LayoutConcurrency the prefix
	// is taken as it is (see docs/ETCD.md, "Layouts").
	Prefix string

	// Layout is the format of the keys: LayoutDlock (the default, also
	// for "") or LayoutConcurrency, etcd's own lock and election format.
	// NewDriver panics on any other value.
	Layout Layout

	// RequestTimeout bounds each request the driver makes; a request that
	// times out is tried again (within the caller's context) where that is
	// safe (see docs/ETCD.md, Failover). Raise it for clusters whose writes
	// are slow. Zero or negative means DefaultRequestTimeout.
	RequestTimeout time.Duration
}

// Driver is the etcd driver: a dlock driver.Driver, driver.Waiter,
// driver.Moder (every mode in LayoutDlock; see Supports) and
// driver.Elector over an etcd cluster reached through a
// go.etcd.io/etcd/client/v3 client. Create it with NewDriver (or New, or
// dlock.Open with an etcd:// URL).
//
// Locks live as long as the driver's session for their TTL (see the
// package documentation and docs/ETCD.md). A Driver is safe for
// concurrent use by multiple goroutines. It must not be copied.
type Driver struct {
	c       *clientv3.Client
	own     bool // opened from a URL: Close closes c
	f       format
	timeout time.Duration // RequestTimeout
	base    time.Time     // origin of the sessions' lossAt, with a monotonic reading
	reads   chan struct{} // a turn for each read of a queue in flight (see queueReads)

	ctx    context.Context // ends at Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // sessions' keep-alive loops

	mu     sync.Mutex
	closed bool
	slots  map[int64]*slot  // by lease TTL in seconds
	locks  map[string]*lock // held locks by owner

	hooks hooks // set only by the package's tests, before the driver is used
}

// slot holds the live session for one lease TTL.
type slot struct {
	grant sync.Mutex // serializes the grant of a new lease
	cur   *session   // guarded by Driver.mu; nil when none is live
}

// lock is a lock the driver holds.
type lock struct {
	name, owner string
	mode        driver.Mode
	k           keys
	rev         int64  // the key's create revision
	token       uint64 // the fencing token: rev, or the revision of the admission write
	s           *session
	gone        atomic.Bool       // set once, when the lock is lost, before notice signals
	notice      driver.LossNotice // Grant.OnLost: signalled when the lock is lost
	unlocking   bool              // guarded by Driver.mu: Unlock owns the slot
}

// hooks let the package's tests (export_test.go) count a driver's watches
// and wake-ups, and stop its keep-alives.
type hooks struct {
	watch   func(name, key string) // a waiter started watching key
	wake    func(name, key string) // a waiter saw key deleted
	requeue func(name string)      // a waiter lost its key and queued again
	// keepAlive, if set, runs in a session's goroutine before each
	// keep-alive; a test blocks it to stop keep-alives and the goroutine.
	keepAlive func(ctx context.Context)
}

// NewDriver returns a driver that uses client, with the options o (nil
// means the defaults). The driver does not close client: the caller keeps
// owning it. It panics if client is nil or o.Layout is unknown.
func NewDriver(client *clientv3.Client, o *Options) *Driver {
	if client == nil {
		panic("etcdlock: NewDriver with a nil client")
	}
	opt := *cmp.Or(o, new(Options))
	if !cmp.Or(opt.Layout, LayoutDlock).known() {
		panic(fmt.Sprintf("etcdlock: NewDriver with Options.Layout %q: %v", opt.Layout, errLayout))
	}
	if opt.RequestTimeout <= 0 {
		opt.RequestTimeout = DefaultRequestTimeout
	}
	d := &Driver{
		c:       client,
		f:       newFormat(opt.Layout, opt.Prefix),
		timeout: opt.RequestTimeout,
		base:    time.Now(),
		reads:   make(chan struct{}, queueReads),
		slots:   map[int64]*slot{},
		locks:   map[string]*lock{},
	}
	d.ctx, d.cancel = context.WithCancel(context.Background())
	return d
}

// New returns a dlock.Locker over NewDriver(client, o), with the Locker
// options opts. Closing the Locker closes the driver but not client.
func New(client *clientv3.Client, o *Options, opts ...dlock.Option) (*dlock.Locker, error) {
	return dlock.New(NewDriver(client, o), opts...)
}

// Scheme returns "etcd", the backend's name in metrics and logs.
func (d *Driver) Scheme() string { return "etcd" }

// Client returns the etcd client the driver uses.
func (d *Driver) Client() *clientv3.Client { return d.c }

// Prefix returns the prefix of every key the driver writes, as
// Options.Prefix describes it for the driver's layout.
func (d *Driver) Prefix() string { return d.f.prefix }

// keys of one acquisition attempt. The key's last segment is the
// session's lease ID in hex, with ".<n>" after it when n > 0: n is the
// lowest slot the session has free for the name, so that a process that
// takes a name again and again writes the same key, as concurrency.Mutex
// does (every new key name would leave an index entry under the name
// until the server compacts, and each acquisition reads that whole
// range). Its value is the acquisition's owner.
type keys struct {
	key  string // lockReq.queue + lockReq.kind + <lease>[.<n>]
	slot slotKey
}

// slotKey names a key slot of a session: one name in one mode, one index.
type slotKey struct {
	mode driver.Mode
	name string
	n    int
}

// Close ends the driver's sessions, revoking their leases so that any key
// left behind goes at once, and closes the client if the driver opened it
// (from a URL). Waiting Lock calls return ErrClosed. Close is idempotent.
func (d *Driver) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	var live []*session
	for _, sl := range d.slots {
		if sl.cur != nil {
			live = append(live, sl.cur)
		}
	}
	d.mu.Unlock()
	d.cancel()
	d.wg.Wait()
	var errs []error
	for _, s := range live {
		s.end(driver.ErrClosed, false)
		ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
		if _, err := d.c.Revoke(ctx, s.id); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			errs = append(errs, fmt.Errorf("etcdlock: close: revoke lease %x: %w", int64(s.id), err))
		}
		cancel()
	}
	if d.own {
		errs = append(errs, d.c.Close())
	}
	return errors.Join(errs...)
}

// closeTimeout bounds each lease revocation Close makes.
const closeTimeout = 2 * time.Second

// req returns the context for one request: ctx, bounded by RequestTimeout.
func (d *Driver) req(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, d.timeout)
}

func (d *Driver) isClosed() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.closed
}

// open is the Opener for etcd:// URLs.
func open(ctx context.Context, u driver.URL) (driver.Driver, error) {
	dial, err := u.PositiveDuration("dial_timeout", DefaultDialTimeout)
	if err != nil {
		return nil, err
	}
	reqTimeout, err := u.PositiveDuration("request_timeout", DefaultRequestTimeout)
	if err != nil {
		return nil, err
	}
	layout := Layout(u.String("layout", string(LayoutDlock)))
	if !layout.known() {
		return nil, u.Err("layout", string(layout), errLayout)
	}
	tlsConfig, err := u.TLS(u.Scheme == "etcds")
	if err != nil {
		return nil, err
	}
	if err := u.Unknown(); err != nil {
		return nil, err
	}
	var user, password string
	if u.User != nil {
		user = u.User.Username()
		password, _ = u.User.Password()
		if user == "" {
			return nil, u.Err("userinfo", "", errors.New("a password needs its user name, as in etcd://user:password@host"))
		}
	}
	eps, err := endpoints(u)
	if err != nil {
		return nil, err
	}
	prefix := layout.urlPrefix(u.Path)
	c, err := clientv3.New(clientv3.Config{
		Endpoints:            eps,
		TLS:                  tlsConfig,
		Username:             user,
		Password:             password,
		DialTimeout:          dial,
		DialKeepAliveTime:    10 * time.Second,
		DialKeepAliveTimeout: 5 * time.Second,
		Logger:               zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("etcdlock: open %v: %w%s", eps, err, tlsCause(eps, tlsConfig))
	}
	// One serializable read shows that a member answers, so that a wrong
	// address fails Open rather than the first Acquire. Without a prefix
	// (LayoutConcurrency) no key is every lock's: the read is of "/", and
	// a role that may not read it may still hold the right to the names
	// it locks, which each acquisition then checks.
	start := time.Now()
	cctx, cancel := context.WithTimeout(ctx, dial)
	_, err = c.Get(cctx, cmp.Or(prefix, "/"), clientv3.WithSerializable(), clientv3.WithCountOnly())
	timedOut := cctx.Err() != nil
	cancel()
	if prefix == "" && errors.Is(err, rpctypes.ErrPermissionDenied) {
		err = nil
	}
	if err != nil {
		_ = c.Close()
		if errors.Is(err, rpctypes.ErrPermissionDenied) {
			who := "the client certificate's common name (the URL names no user)"
			if user != "" {
				who = "user " + strconv.Quote(user)
			}
			return nil, fmt.Errorf("etcdlock: open: read from etcd at %v: %w: %s may not read the prefix %q", eps, err, who, prefix)
		}
		if !timedOut {
			return nil, fmt.Errorf("etcdlock: open: read from etcd at %v: %w", eps, err)
		}
		return nil, fmt.Errorf("etcdlock: open: no etcd member at %v answered %s: %w%s", eps, openBound(ctx, dial, start), err,
			tlsCause(eps, tlsConfig))
	}
	d := NewDriver(c, &Options{Prefix: prefix, Layout: layout, RequestTimeout: reqTimeout})
	d.own = true
	return d, nil
}

// tlsCause returns, for an Open that failed, why the TLS connection to
// the first endpoint fails, or that a plain URL reached a TLS server (the
// etcd client reports only a timeout); "" when TLS is not the cause.
func tlsCause(eps []string, cfg *tls.Config) string {
	if cfg == nil {
		if tlsprobe.SpeaksTLS(eps[0], time.Second) {
			return fmt.Sprintf("; %s speaks TLS: use etcds:// (or tls=true)", eps[0])
		}
		return ""
	}
	if err := tlsprobe.Why(eps[0], cfg, time.Second); err != nil {
		return "; " + err.Error()
	}
	return ""
}

// openBound says which bound cut Open's first read short, the caller's
// context or the dial timeout, so that the message names the right
// setting; for the context, the wait's own length, which the caller can
// match with its deadline (the context may predate Open).
func openBound(ctx context.Context, dial time.Duration, start time.Time) string {
	err := ctx.Err()
	switch {
	case err == nil:
		return fmt.Sprintf("within the dial timeout %v (dial_timeout)", dial)
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Sprintf("before the caller's context reached its deadline, after %v of waiting", time.Since(start).Round(time.Millisecond))
	default:
		return fmt.Sprintf("before the caller's context was canceled, after %v of waiting", time.Since(start).Round(time.Millisecond))
	}
}

// endpoints returns the URL's comma-separated host[:port] list; the port
// defaults to 2379.
func endpoints(u driver.URL) ([]string, error) {
	if u.Host == "" {
		return []string{DefaultEndpoint}, nil
	}
	var eps []string
	for h := range strings.SplitSeq(u.Host, ",") {
		if h == "" {
			return nil, u.Err("host", u.Host, errors.New("empty endpoint in the list"))
		}
		if _, _, err := net.SplitHostPort(h); err != nil {
			if strings.Contains(err.Error(), "missing port") {
				h = net.JoinHostPort(strings.Trim(h, "[]"), "2379")
			} else {
				return nil, u.Err("host", h, err)
			}
		}
		eps = append(eps, h)
	}
	return eps, nil
}

var (
	_ driver.Schemer     = (*Driver)(nil)
	_ driver.Inspector   = (*Driver)(nil)
	_ driver.Unsupporter = (*Driver)(nil)
)
