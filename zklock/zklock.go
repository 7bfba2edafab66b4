package zklock

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/internal/bg"
)

// Defaults of Options.
const (
	// DefaultPrefix is the znode under which locks live.
	DefaultPrefix = "/dlock"
	// DefaultSessionTimeout is the ZooKeeper session timeout the driver
	// asks for: how long the ensemble keeps a silent client's locks.
	DefaultSessionTimeout = 10 * time.Second
	// DefaultPort is the port of a server address given without one.
	DefaultPort = "2181"
)

// MinSessionTimeout is the shortest session timeout the driver accepts.
// Servers grant no less than two of their ticks (tickTime, 2s by default).
const MinSessionTimeout = 100 * time.Millisecond

// Options configure a Driver. The zero value, like a nil *Options, means
// every default.
type Options struct {
	// Prefix is the znode under which the driver keeps its locks: the
	// lock called "orders/42" lives under <Prefix>/orders/42. It starts
	// with a slash; its segments follow the rules of lock names
	// (dlock.ValidateName), and it must not be the root nor lie under
	// /zookeeper. Default DefaultPrefix.
	Prefix string

	// SessionTimeout is the session timeout the driver asks for: a lock
	// outlives a connection loss shorter than that, and no longer one.
	// The server clamps it to its minSessionTimeout..maxSessionTimeout (2
	// to 20 ticks unless configured); the driver uses the granted value.
	// Default DefaultSessionTimeout.
	SessionTimeout time.Duration

	// Auth are the identities every session authenticates with
	// (ZooKeeper's addauth) before any other request, such as {Scheme:
	// "digest", Credential: "user:password"}. Default none.
	Auth []Auth

	// TLS, when set, makes every connection a TLS one, for servers'
	// secure client port (secureClientPort); a server's certificate is
	// checked against the host dialled unless TLS.ServerName says
	// otherwise. Default nil: plain TCP.
	TLS *tls.Config

	// ACL is the access control list of the nodes the driver creates;
	// nodes that exist already keep theirs. Default, with Auth,
	// zk.AuthACL(zk.PermAll): every right to the identities the creating
	// session authenticated with and to no one else (only clients of the
	// same user can take, release or delete those locks); without,
	// zk.WorldACL(zk.PermAll).
	ACL []zk.ACL

	// Layout is the format of the lock nodes: LayoutDlock (the default),
	// or LayoutCurator or LayoutKazoo, to exclude that library's recipes
	// on the same names; a peer's layout has no semaphore (see
	// docs/INTEROP.md).
	Layout Layout

	// Logger receives session events (connection lost, session ended) and,
	// at Debug level, the ZooKeeper client's own messages. Default: none.
	Logger *slog.Logger
}

// Driver is the ZooKeeper driver: a dlock driver.Driver, driver.Waiter,
// driver.Moder (see Supports) and driver.Elector over one ZooKeeper
// ensemble. Create it with NewDriver (or New, or dlock.Open with a zk://
// URL). It owns one session at a time, shared by all its locks: when the
// session ends (expired, out of reach past the session timeout, or the
// driver closed), its locks are lost and the next call opens a new one.
// A Driver is safe for concurrent use by multiple goroutines. It must not
// be copied.
type Driver struct {
	opt     Options // defaults filled in
	servers []string
	format  *format // the Layout's

	// bg counts the driver's goroutines (the sessions' own, a release or
	// an acquisition that outlived its caller's context, the watch of a
	// held node, Observe's); Close waits for them, at most closeWait.
	bg bg.Group

	mu     sync.Mutex
	sess   *session
	held   map[string]*node // by owner
	byPath map[string]*node // the held nodes, by path: see nodeEvent
	closed bool
}

// testHooks are the counters and switches of export_test.go, by driver;
// the tests alone set hooked, so that outside them counting costs one
// atomic load.
var (
	hooked    atomic.Bool
	testHooks sync.Map // *Driver -> *hooks
)

// hooks are a driver's test hooks: refuse makes the dialer fail, as for a
// crashed process; wakeups counts the watch notifications waiters got,
// listings the acquisitions' child listings, waiting the waiters whose
// watch is set.
type hooks struct {
	refuse                     atomic.Bool
	wakeups, listings, waiting atomic.Int64
}

// hooks returns d's test hooks, nil outside the tests.
func (d *Driver) hooks() *hooks {
	if !hooked.Load() {
		return nil
	}
	h, ok := testHooks.Load(d)
	if !ok {
		h, _ = testHooks.LoadOrStore(d, new(hooks))
	}
	return h.(*hooks)
}

// NewDriver returns a driver for the ensemble whose servers are given as
// host:port addresses (a missing port means DefaultPort), with the options
// o (nil means the defaults). It starts connecting at once but does not
// wait for a session: an unreachable ensemble shows in the first call.
// Close the driver to end its session.
func NewDriver(servers []string, o *Options) (*Driver, error) {
	opt := *cmp.Or(o, new(Options))
	if len(servers) == 0 {
		return nil, errors.New("zklock: no server address")
	}
	addrs, err := serverAddrs(servers)
	if err != nil {
		return nil, err
	}
	if opt.Prefix == "" {
		opt.Prefix = DefaultPrefix
	}
	if err := checkPrefix(opt.Prefix); err != nil {
		return nil, err
	}
	if opt.SessionTimeout == 0 {
		opt.SessionTimeout = DefaultSessionTimeout
	}
	if opt.SessionTimeout < MinSessionTimeout {
		return nil, fmt.Errorf("zklock: session timeout %v is below the minimum %v", opt.SessionTimeout, MinSessionTimeout)
	}
	for _, a := range opt.Auth {
		if a.Scheme == "" {
			return nil, errors.New("zklock: an Auth without a scheme")
		}
	}
	if opt.ACL == nil {
		opt.ACL = zk.WorldACL(zk.PermAll)
		if len(opt.Auth) > 0 {
			opt.ACL = zk.AuthACL(zk.PermAll)
		}
	}
	f, err := formatOf(opt.Layout)
	if err != nil {
		return nil, err
	}
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.DiscardHandler)
	}
	opt.Auth = slices.Clone(opt.Auth)
	d := &Driver{
		opt:     opt,
		servers: addrs,
		format:  f,
		held:    map[string]*node{},
		byPath:  map[string]*node{},
	}
	if _, err := d.session(); err != nil {
		return nil, err
	}
	return d, nil
}

// New returns a dlock.Locker over NewDriver(servers, o), with the Locker
// options opts. Closing the Locker closes the driver and its session.
func New(servers []string, o *Options, opts ...dlock.Option) (*dlock.Locker, error) {
	d, err := NewDriver(servers, o)
	if err != nil {
		return nil, err
	}
	return dlock.New(d, opts...)
}

// Scheme returns "zk", the backend's name in metrics and logs.
func (d *Driver) Scheme() string { return "zk" }

// Prefix returns the znode under which the driver keeps its locks.
func (d *Driver) Prefix() string { return d.opt.Prefix }

// Close ends the driver's session, which removes its lock nodes at once
// (or, with the ensemble out of reach, when the session times out): locks
// still held are lost. It then waits at most 5 s for the driver's own
// goroutines (a release that outlived its context, the close of an
// earlier session), so that none runs once it returns, and returns an
// error if they take longer. Close is idempotent.
func (d *Driver) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	s := d.sess
	d.sess = nil
	d.mu.Unlock()
	if s != nil {
		s.end(driver.ErrClosed)
		s.conn.Close() // waits (boundedly) for the server to close the session
	}
	if !d.bg.Wait(closeWait) {
		return fmt.Errorf("zklock: close: the driver's background work (a release, the close of a session) did not end within %v", closeWait)
	}
	return nil
}

// closeWait bounds Close's wait for the driver's background work, which
// the session's end ends.
const closeWait = 5 * time.Second

// session returns the driver's live session, opening one if there is none.
func (d *Driver) session() (*session, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, driver.ErrClosed
	}
	if d.sess != nil && !d.sess.ended() {
		return d.sess, nil
	}
	s, err := d.dial()
	if err != nil {
		return nil, err
	}
	d.sess = s
	return s, nil
}

// ready returns the driver's session once it has authenticated (at once
// without Auth), or the error that ended it; it waits as long as ctx
// allows.
func (d *Driver) ready(ctx context.Context) (*session, error) {
	s, err := d.session()
	if err != nil {
		return nil, err
	}
	select {
	case <-s.authed:
		return s, nil
	case <-s.done:
		return nil, s.endErr
	case <-ctx.Done():
		return nil, s.withDialErr(ctx.Err())
	}
}

// Auth is an identity a session authenticates with: ZooKeeper's addauth
// with Scheme (such as "digest") and Credential ("user:password" for
// digest).
type Auth struct {
	Scheme     string
	Credential string
}

// String names the identity without its secret: the scheme, and the user
// of a digest.
func (a Auth) String() string {
	if a.Scheme == "digest" {
		user, _, _ := strings.Cut(a.Credential, ":")
		return "digest:" + user
	}
	return a.Scheme
}

// serverAddrs checks server addresses and adds the default port where
// one names none.
func serverAddrs(servers []string) ([]string, error) {
	addrs := make([]string, len(servers))
	for i, s := range servers {
		if s == "" {
			return nil, errors.New("zklock: empty server address")
		}
		addrs[i] = s
		if _, _, err := net.SplitHostPort(s); err != nil {
			if !strings.Contains(err.Error(), "missing port") {
				return nil, fmt.Errorf("zklock: server address %q: %w", s, err)
			}
			addrs[i] = net.JoinHostPort(s, DefaultPort)
		}
	}
	return addrs, nil
}

// checkPrefix reports whether p can be the driver's prefix.
func checkPrefix(p string) error {
	rest, ok := strings.CutPrefix(p, "/")
	if !ok || rest == "" {
		return fmt.Errorf("zklock: prefix %q must be a znode path below the root, like %q", p, DefaultPrefix)
	}
	if rest == "zookeeper" || strings.HasPrefix(rest, "zookeeper/") {
		return fmt.Errorf("zklock: prefix %q lies in ZooKeeper's own /zookeeper tree", p)
	}
	if err := dlock.ValidateName(rest); err != nil {
		return fmt.Errorf("zklock: prefix %q: %w", p, err)
	}
	return nil
}

func init() {
	dlock.Register("zk", open)
}

// open is the Opener of zk:// URLs (see the package documentation).
func open(ctx context.Context, u driver.URL) (driver.Driver, error) {
	timeout, err := u.Duration("session_timeout", DefaultSessionTimeout)
	if err != nil {
		return nil, err
	}
	if timeout < MinSessionTimeout {
		return nil, u.Err("session_timeout", u.String("session_timeout", ""), fmt.Errorf("below the minimum %v", MinSessionTimeout))
	}
	var o Options
	if u.User != nil {
		pw, ok := u.User.Password()
		if u.User.Username() == "" || !ok {
			return nil, u.Err("userinfo", u.User.Username(), errors.New("digest authentication needs user and password, as in zk://user:password@host/prefix"))
		}
		o.Auth = []Auth{{Scheme: "digest", Credential: u.User.Username() + ":" + pw}}
	}
	if o.TLS, err = u.TLS(false); err != nil {
		return nil, err
	}
	if u.Has("acl") {
		if o.ACL, err = parseACL(u.String("acl", "")); err != nil {
			return nil, u.Err("acl", u.String("acl", ""), err)
		}
	}
	if u.Has("layout") {
		o.Layout = Layout(u.String("layout", ""))
		if _, err := formatOf(o.Layout); err != nil {
			return nil, u.Err("layout", string(o.Layout), fmt.Errorf("want %s, %s or %s", LayoutDlock, LayoutCurator, LayoutKazoo))
		}
	}
	if err := u.Unknown(); err != nil {
		return nil, err
	}
	if u.Host == "" {
		return nil, u.Err("host", "", errors.New("no server: want zk://host:port[,host:port...]/prefix"))
	}
	servers, err := serverAddrs(strings.Split(u.Host, ","))
	if err != nil {
		return nil, u.Err("host", u.Host, err)
	}
	prefix := u.Path
	if prefix == "" || prefix == "/" {
		prefix = DefaultPrefix
	}
	if err := checkPrefix(prefix); err != nil {
		return nil, u.Err("path", u.Path, err)
	}
	o.Prefix, o.SessionTimeout, o.Logger = prefix, timeout, u.Logger
	d, err := NewDriver(servers, &o)
	if err != nil || len(o.Auth) == 0 && o.TLS == nil {
		return d, err
	}
	// A secured URL is checked at once: a TLS failure would otherwise show
	// only in the first lock's call, and a wrong password is accepted by
	// ZooKeeper's addauth and refused only where an ACL names another
	// identity.
	if err := d.checkAccess(ctx); err != nil {
		_ = d.Close()
		return nil, fmt.Errorf("zklock: open %s: %w", u.Redacted(), err)
	}
	return d, nil
}

// checkAccess waits, at most the session timeout (even under a context
// without a deadline: a server refusing every connection must not hold
// Open for ever), for an authenticated session, and lists the prefix
// node's children (READ on it), which the prefix's ACL refuses to an
// identity it does not name. A missing prefix is fine: the first lock
// creates it.
func (d *Driver) checkAccess(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, d.opt.SessionTimeout)
	defer cancel()
	s, err := d.ready(ctx)
	if err != nil {
		return err
	}
	return d.call(ctx, func() error {
		_, _, err := s.conn.Children(d.opt.Prefix)
		switch {
		case err == nil, errors.Is(err, zk.ErrNoNode):
			return nil
		case unsent(err):
			return s.withDialErr(err)
		case errors.Is(err, zk.ErrNoAuth) && len(d.opt.Auth) == 0:
			return fmt.Errorf("an unauthenticated client may not read %s: %w", d.opt.Prefix, err)
		case errors.Is(err, zk.ErrNoAuth):
			return fmt.Errorf("the identity %v may not read %s (wrong password, or its ACL names another user): %w", d.opt.Auth[0], d.opt.Prefix, err)
		}
		return err
	})
}

// parseACL reads the acl parameter: a comma-separated list of entries,
// each "creator" (the creating session's identities, ZooKeeper's auth
// scheme), "world" (anyone) or "<scheme>:<id>", each optionally followed
// by ":" and its rights among c, d, r, w and a (every right without).
func parseACL(v string) ([]zk.ACL, error) {
	var acl []zk.ACL
	for e := range strings.SplitSeq(v, ",") {
		var perms string
		parts := strings.Split(e, ":")
		a, named := namedACL[parts[0]]
		switch {
		case named && len(parts) <= 2:
			if len(parts) == 2 {
				perms = parts[1]
			}
		case len(parts) >= 2 && parts[0] != "" && parts[1] != "":
			rest := parts[1:]
			if len(rest) >= 2 && isPerms(rest[len(rest)-1]) {
				perms, rest = rest[len(rest)-1], rest[:len(rest)-1]
			}
			a = zk.ACL{Scheme: parts[0], ID: strings.Join(rest, ":")}
		default:
			return nil, fmt.Errorf("entry %q: want creator, world or scheme:id, each with an optional :rights (of cdrwa)", e)
		}
		var err error
		if a.Perms, err = permMask(perms); err != nil {
			return nil, fmt.Errorf("entry %q: %w", e, err)
		}
		acl = append(acl, a)
	}
	return acl, nil
}

// namedACL are the acl parameter's entries without an id (see parseACL).
var namedACL = map[string]zk.ACL{"creator": {Scheme: "auth"}, "world": {Scheme: "world", ID: "anyone"}}

// isPerms reports whether s is a non-empty set of rights letters.
func isPerms(s string) bool {
	return s != "" && strings.Trim(s, "cdrwa") == ""
}

// permMask turns rights letters into ZooKeeper's mask; empty means all.
func permMask(s string) (int32, error) {
	if s == "" {
		return zk.PermAll, nil
	}
	var m int32
	for _, c := range s {
		bit, ok := permBits[c]
		if !ok {
			return 0, fmt.Errorf("right %q: want letters of cdrwa", c)
		}
		m |= bit
	}
	return m, nil
}

// permBits are ZooKeeper's rights, by their letter in the acl parameter.
var permBits = map[rune]int32{'c': zk.PermCreate, 'd': zk.PermDelete, 'r': zk.PermRead, 'w': zk.PermWrite, 'a': zk.PermAdmin}

var (
	_ driver.Inspector   = (*Driver)(nil)
	_ driver.Unsupporter = (*Driver)(nil)
	_ driver.Schemer     = (*Driver)(nil)
)
