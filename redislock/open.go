package redislock

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
)

// DefaultPort is the Redis port used when a URL names none.
const DefaultPort = "6379"

func init() {
	dlock.Register("redis", open)
	dlock.Register("rediss", open)
}

// open is the Opener of redis:// and rediss:// URLs (see the package
// documentation for their form and parameters). It pings the server, so
// that a wrong address fails here rather than at the first lock.
func open(ctx context.Context, u driver.URL) (driver.Driver, error) {
	opt, err := clientOptions(u)
	if err != nil {
		return nil, err
	}
	o, err := driverOptions(u)
	if err != nil {
		return nil, err
	}
	if err := u.Unknown(); err != nil {
		return nil, err
	}
	c := redis.NewClient(opt)
	if err := c.Ping(ctx).Err(); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("redislock: open %s: ping %s: %w", u.Redacted(), opt.Addr, err)
	}
	// The policy is read here, with the caller's context, so that the
	// warning comes before the first lock is taken.
	checkEviction(ctx, c, logger(o))
	d := buildDriver(c, o)
	d.ownClient = true
	return d, nil
}

// clientOptions reads the URL's address, credentials, database and
// connection parameters.
func clientOptions(u driver.URL) (*redis.Options, error) {
	host := u.Hostname()
	if host == "" {
		return nil, u.Err("host", u.Host, errors.New("missing: the URL must name the server, as in redis://127.0.0.1:6379"))
	}
	port := u.Port()
	if port == "" {
		port = DefaultPort
	} else if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return nil, u.Err("port", port, errors.New("not a port number (1 to 65535)"))
	}
	// ContextTimeoutEnabled: a context's deadline bounds the socket I/O
	// of a call, so that Acquire and TryLock return by it even when the
	// server stops answering (see Requests in the package documentation).
	opt := &redis.Options{Addr: net.JoinHostPort(host, port), ContextTimeoutEnabled: true}
	if u.User != nil {
		opt.Username = u.User.Username()
		opt.Password, _ = u.User.Password()
	}
	if db := strings.TrimPrefix(u.Path, "/"); db != "" {
		n, err := strconv.Atoi(db)
		if err != nil || n < 0 {
			return nil, u.Err("db", db, errors.New("the path must be a database number, as in redis://host:6379/2"))
		}
		opt.DB = n
	}
	if u.Scheme == "rediss" {
		opt.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12, ServerName: host}
	}

	var err error
	if opt.DialTimeout, err = u.Duration("dial_timeout", 0); err != nil {
		return nil, err
	}
	if opt.ReadTimeout, err = u.Duration("read_timeout", 0); err != nil {
		return nil, err
	}
	if opt.WriteTimeout, err = u.Duration("write_timeout", 0); err != nil {
		return nil, err
	}
	if opt.PoolSize, err = u.Int("pool_size", 0); err != nil {
		return nil, err
	}
	if opt.PoolSize < 0 {
		return nil, u.Err("pool_size", strconv.Itoa(opt.PoolSize), errors.New("must not be negative"))
	}
	if opt.MaxRetries, err = u.Int("max_retries", 0); err != nil {
		return nil, err
	}
	if opt.MaxRetries < -1 {
		return nil, u.Err("max_retries", strconv.Itoa(opt.MaxRetries), errors.New("must be -1 (no retries) or more"))
	}
	opt.ClientName = u.String("client_name", "")
	return opt, nil
}

// driverOptions reads the parameters of the driver itself.
func driverOptions(u driver.URL) (*Options, error) {
	o := &Options{Prefix: u.String("prefix", DefaultPrefix), Logger: u.Logger}
	if o.Prefix == "" || strings.ContainsAny(o.Prefix, "{}") {
		return nil, u.Err("prefix", o.Prefix, errors.New("must be non-empty and hold no braces"))
	}
	var err error
	if o.QueueTTL, err = u.Duration("queue_ttl", DefaultQueueTTL); err != nil {
		return nil, err
	}
	if o.FenceTTL, err = u.Duration("fence_ttl", DefaultFenceTTL); err != nil {
		return nil, err
	}
	if o.WaitReplicas, err = u.Int("wait_replicas", 0); err != nil {
		return nil, err
	}
	if o.WaitReplicas < 0 {
		return nil, u.Err("wait_replicas", strconv.Itoa(o.WaitReplicas), errors.New("must not be negative"))
	}
	if o.WaitTimeout, err = u.Duration("wait_timeout", DefaultWaitTimeout); err != nil {
		return nil, err
	}
	if o.WaitTimeout == 0 {
		return nil, u.Err("wait_timeout", u.String("wait_timeout", ""), errors.New("must be positive"))
	}
	if o.QueueTTL == 0 {
		return nil, u.Err("queue_ttl", u.String("queue_ttl", ""), errors.New("must be positive"))
	}
	if o.FenceTTL == 0 {
		return nil, u.Err("fence_ttl", u.String("fence_ttl", ""), errors.New("must be positive"))
	}
	return o, nil
}
