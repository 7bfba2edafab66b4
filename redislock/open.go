package redislock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/internal/redisutil"
)

// DefaultPort is the Redis port used when a URL names none.
const DefaultPort = "6379"

func init() {
	for _, scheme := range []string{"redis", "rediss", "redis+sentinel", "rediss+sentinel", "redis+cluster", "rediss+cluster"} {
		dlock.Register(scheme, open)
	}
}

// open is the Opener of the URLs of the package documentation. It pings
// the server (the primary, through the sentinels; a cluster node), so that
// a wrong address fails here rather than at the first lock.
func open(ctx context.Context, u driver.URL) (driver.Driver, error) {
	c, addr, w, err := newClient(u)
	if err != nil {
		return nil, err
	}
	o, err := driverOptions(u)
	if err == nil {
		err = u.Unknown()
	}
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	if err := check(ctx, c, w); err != nil {
		closeBy(ctx, c)
		if errors.Is(err, io.EOF) && !strings.HasPrefix(u.Scheme, "rediss") {
			// A TLS-only server drops a plain client's first command.
			return nil, fmt.Errorf("redislock: open %s: ping %s: %w (the server closed the connection: if it speaks TLS only, use rediss://)",
				u.Redacted(), addr, err)
		}
		return nil, fmt.Errorf("redislock: open %s: ping %s: %w", u.Redacted(), addr, err)
	}
	// The policy is read here, with the caller's context, so that the
	// warning comes before the first lock is taken.
	checkEviction(ctx, c, logger(o))
	d := buildDriver(c, o)
	d.ownClient = true
	d.sentinel = w.failover
	return d, nil
}

// check pings c within dial_timeout plus read_timeout, while w watches its
// dials: a definitive failure (a refused connection, a server that does
// not speak TLS) ends the ping at once and is the error.
func check(ctx context.Context, c redis.UniversalClient, w *openCheck) error {
	pctx, cancel := context.WithTimeout(ctx, w.bound)
	defer cancel()
	pctx, cancelCause := context.WithCancelCause(pctx)
	defer cancelCause(nil)
	w.d.watch(cancelCause, w.listed, w.others)
	err := c.Ping(pctx).Err()
	if de, ok := errors.AsType[definitiveError](context.Cause(pctx)); ok && err != nil {
		err = de.error
	}
	w.d.done(err == nil)
	return err
}

// closeBy closes c, a client whose check failed, waiting for its Close
// no longer than ctx allows: a failover client's Close waits for the
// sentinel query under way, which ends soon once its connection is
// closed (see dialer.done) but after go-redis's retry backoff.
func closeBy(ctx context.Context, c redis.UniversalClient) {
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		_ = c.Close()
	}()
	select {
	case <-closed:
	case <-ctx.Done():
	}
}

// openCheck is what check needs of the client that newClient built.
type openCheck struct {
	d      *dialer
	bound  time.Duration
	listed []string // the URL's servers
	others bool     // a refusal by a server the URL does not list is definitive

	failover *redis.FailoverOptions // the client's, for a redis+sentinel:// URL
}

// newClient builds the client of the URL's topology, and says what it
// pings, for errors, and how to check it.
func newClient(u driver.URL) (redis.UniversalClient, string, *openCheck, error) {
	o, err := connOptions(u)
	if err != nil {
		return nil, "", nil, err
	}
	// go-redis's default dial and read timeouts: 5s and 3s.
	w := &openCheck{d: newDialer(cmp.Or(o.DialTimeout, 5*time.Second), o.TLSConfig, u.Scheme)}
	w.bound = w.d.timeout + cmp.Or(o.ReadTimeout, 3*time.Second)
	o.Dialer = w.d.dial
	switch strings.TrimPrefix(strings.TrimPrefix(u.Scheme, "redis"), "s") {
	case "+sentinel":
		if err := sentinelOptions(u, o); err != nil {
			return nil, "", nil, err
		}
		// The primary's address comes from the sentinels: its refusal is
		// definitive too.
		w.listed, w.others, w.failover = o.Addrs, true, o.Failover()
		return redis.NewFailoverClient(w.failover), "the primary " + o.MasterName + " via " + strings.Join(o.Addrs, ","), w, nil
	case "+cluster":
		if err := clusterOptions(u, o); err != nil {
			return nil, "", nil, err
		}
		w.listed = o.Addrs
		co := o.Cluster()
		co.ClusterStateReloadInterval = ClusterReloadInterval
		return redis.NewClusterClient(co), strings.Join(o.Addrs, ","), w, nil
	}
	if err := serverOptions(u, o); err != nil {
		return nil, "", nil, err
	}
	w.listed = o.Addrs
	return redis.NewClient(o.Simple()), o.Addrs[0], w, nil
}

// connOptions reads what every topology's URL sets alike: the data nodes'
// credentials, TLS ("rediss", with driver.URL.TLS's parameters; without
// server_name each certificate is checked against the address dialled) and
// the connection parameters. ContextTimeoutEnabled lets a context's
// deadline bound a call's socket I/O, so that Acquire and TryLock return
// by it even when the server stops answering (see Requests in
// docs/REDIS.md).
func connOptions(u driver.URL) (*redis.UniversalOptions, error) {
	o := &redis.UniversalOptions{ContextTimeoutEnabled: true, DialerRetries: 1}
	o.Username = u.User.Username() // nil-safe: "" without user information
	o.Password, _ = u.User.Password()
	var err error
	o.TLSConfig, err = u.TLS(strings.HasPrefix(u.Scheme, "rediss"))
	dur := func(name string) (v time.Duration) { // the first error is kept
		if err == nil {
			v, err = u.Duration(name, 0)
		}
		return v
	}
	o.DialTimeout, o.ReadTimeout, o.WriteTimeout = dur("dial_timeout"), dur("read_timeout"), dur("write_timeout")
	if err == nil {
		o.PoolSize, err = u.Int("pool_size", 0)
	}
	if err != nil {
		return nil, err
	}
	if o.PoolSize < 0 {
		return nil, u.Err("pool_size", strconv.Itoa(o.PoolSize), errors.New("must not be negative"))
	}
	if o.MaxRetries, err = u.Int("max_retries", 0); err != nil {
		return nil, err
	}
	if o.MaxRetries < -1 {
		return nil, u.Err("max_retries", strconv.Itoa(o.MaxRetries), errors.New("must be -1 (no retries) or more"))
	}
	o.ClientName = u.String("client_name", "")
	return o, nil
}

// serverOptions reads the rest of a redis:// or rediss:// URL: one
// server and its database.
func serverOptions(u driver.URL, o *redis.UniversalOptions) error {
	host := u.Hostname()
	if host == "" {
		return u.Err("host", u.Host, errors.New("missing: the URL must name the server, as in redis://127.0.0.1:6379"))
	}
	if strings.Contains(u.Host, ",") {
		return u.Err("host", u.Host, errors.New("one server only: name several with redis+sentinel:// or redis+cluster://, or use redlock:// for independent masters"))
	}
	port := u.Port()
	if port == "" {
		port = DefaultPort
	} else if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return u.Err("port", port, errors.New("not a port number (1 to 65535)"))
	}
	o.Addrs = []string{net.JoinHostPort(host, port)}
	return database(u, o)
}

// sentinelOptions reads the rest of a redis+sentinel:// or
// rediss+sentinel:// URL: the sentinels (the host list and every addr
// parameter), master_name, the sentinels' own credentials
// (sentinel_username, sentinel_password) and the database.
func sentinelOptions(u driver.URL, o *redis.UniversalOptions) error {
	if err := hostList(u, o, DefaultSentinelPort, "redis+sentinel://127.0.0.1:26379?master_name=mymaster"); err != nil {
		return err
	}
	if o.MasterName = u.String("master_name", ""); o.MasterName == "" {
		return u.Err("master_name", "", errors.New("missing: the name the sentinels monitor the primary by, as in ?master_name=mymaster"))
	}
	o.SentinelUsername = u.String("sentinel_username", "")
	o.SentinelPassword = u.String("sentinel_password", "")
	return database(u, o)
}

// clusterOptions reads the rest of a redis+cluster:// or rediss+cluster://
// URL: the seed nodes (the host list and every addr parameter); the
// cluster finds the others itself. A cluster has database 0 only.
func clusterOptions(u driver.URL, o *redis.UniversalOptions) error {
	if err := hostList(u, o, DefaultPort, "redis+cluster://127.0.0.1:7000,127.0.0.1:7001"); err != nil {
		return err
	}
	if db := strings.Trim(u.Path, "/"); db != "" && db != "0" {
		return u.Err("db", db, errors.New("a Redis Cluster has database 0 only: leave the path empty"))
	}
	return nil
}

// ClusterReloadInterval is how old a redis+cluster:// client's slot map
// may grow before go-redis rereads it (ClusterStateReloadInterval, 60s by
// default), so that a dead primary's slots go to its replica soon after it
// took over (see Cluster in docs/REDIS.md). A reread is one CLUSTER SLOTS,
// made only while calls are being sent.
const ClusterReloadInterval = time.Second

// DefaultSentinelPort is the Sentinel port used when a redis+sentinel://
// URL names none for a sentinel.
const DefaultSentinelPort = "26379"

// hostList sets o.Addrs to the addresses of the URL's comma-separated host
// list followed by those of its addr parameters (go-redis's form), each
// with defPort when it names no port.
func hostList(u driver.URL, o *redis.UniversalOptions, defPort, example string) error {
	var list []string
	if u.Host != "" {
		list = strings.Split(u.Host, ",")
	}
	list = append(list, u.Query()["addr"]...)
	u.String("addr", "") // read: not unknown
	if len(list) == 0 {
		return u.Err("host", "", fmt.Errorf("missing: the URL must name at least one server, as in %s", example))
	}
	var err error
	o.Addrs, err = redisutil.HostList(u, list, defPort, "listed twice")
	return err
}

// database sets o.DB to the URL's path, the database number.
func database(u driver.URL, o *redis.UniversalOptions) error {
	db := strings.Trim(u.Path, "/")
	if db == "" {
		return nil
	}
	n, err := strconv.Atoi(db)
	if err != nil || n < 0 {
		return u.Err("db", db, errors.New("the path must be a database number, as in redis://host:6379/2"))
	}
	o.DB = n
	return nil
}

// driverOptions reads the parameters of the driver itself.
func driverOptions(u driver.URL) (*Options, error) {
	o, err := layoutOptions(u)
	if err != nil {
		return nil, err
	}
	if o.FenceTTL, err = u.PositiveDuration("fence_ttl", DefaultFenceTTL); err != nil {
		return nil, err
	}
	if o.WaitReplicas, err = u.Int("wait_replicas", 0); err != nil {
		return nil, err
	}
	switch {
	case o.WaitReplicas < 0:
		return nil, u.Err("wait_replicas", strconv.Itoa(o.WaitReplicas), errors.New("must not be negative"))
	case o.WaitReplicas == 0 && u.Has("wait_replicas"):
		o.WaitReplicas = -1 // an explicit 0 turns the wait off
	}
	if o.WaitTimeout, err = u.PositiveDuration("wait_timeout", DefaultWaitTimeout); err != nil {
		return nil, err
	}
	return o, nil
}

// layoutOptions reads the layout and the parameters that depend on it:
// prefix (empty by default in layout=redsync, whose keys are a peer's bare
// names), queue_ttl (layout=dlock) and poll_interval (layout=redsync).
func layoutOptions(u driver.URL) (*Options, error) {
	o := &Options{Layout: Layout(u.String("layout", string(LayoutDlock))), Logger: u.Logger}
	var err error
	switch o.Layout {
	case LayoutDlock:
		o.Prefix = u.String("prefix", DefaultPrefix)
		if o.Prefix == "" || strings.ContainsAny(o.Prefix, "{}") {
			return nil, u.Err("prefix", o.Prefix, errors.New("must be non-empty and hold no braces"))
		}
		if err := absent(u, "poll_interval", "only with layout=redsync: layout=dlock's waiters are handed the lock"); err != nil {
			return nil, err
		}
		o.QueueTTL, err = u.PositiveDuration("queue_ttl", DefaultQueueTTL)
	case LayoutRedsync:
		o.Prefix = u.String("prefix", "")
		if strings.ContainsAny(o.Prefix, "{}") {
			return nil, u.Err("prefix", o.Prefix, errors.New("must hold no braces"))
		}
		if err := absent(u, "queue_ttl", "only with layout=dlock: layout=redsync has no queue"); err != nil {
			return nil, err
		}
		o.PollInterval, err = u.PositiveDuration("poll_interval", DefaultPollInterval)
	default:
		return nil, u.Err("layout", string(o.Layout), errors.New(`must be "dlock" (the default) or "redsync" (the plain key of redsync and bsm/redislock)`))
	}
	if err != nil {
		return nil, err
	}
	return o, nil
}

// absent refuses parameter name, meaningless with the URL's other
// parameters (why says so), when it is given.
func absent(u driver.URL, name, why string) error {
	if !u.Has(name) {
		return nil
	}
	return u.Err(name, u.String(name, ""), errors.New(why))
}
