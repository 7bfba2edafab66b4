package redlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/internal/redisutil"
)

// DefaultPort is the port of a node given without one.
const DefaultPort = "6379"

func init() {
	dlock.Register("redlock", open)
}

// open is the opener of redlock:// URLs; see the package documentation
// for their form and parameters. It opens no connection: nodes are dialed
// on first use, so a Locker opens even while some nodes are down.
func open(_ context.Context, u driver.URL) (driver.Driver, error) {
	addrs, err := nodeAddrs(u)
	if err != nil {
		return nil, err
	}
	if u.Path != "" && u.Path != "/" {
		return nil, u.Err("path", u.Path, errors.New("a redlock URL has no path"))
	}
	o := Options{Logger: u.Logger}
	if o.NodeTimeout, err = u.Duration("node_timeout", DefaultNodeTimeout); err != nil {
		return nil, err
	}
	if o.NodeTimeout < MinNodeTimeout || o.NodeTimeout > MaxNodeTimeout {
		return nil, u.Err("node_timeout", u.String("node_timeout", ""),
			fmt.Errorf("must be between %v and %v", MinNodeTimeout, MaxNodeTimeout))
	}
	if o.Drift, err = u.PositiveDuration("drift", DefaultDrift); err != nil {
		return nil, err
	}
	o.Prefix = u.String("prefix", DefaultPrefix)
	if o.Prefix == "" || strings.ContainsAny(o.Prefix, "{}") {
		return nil, u.Err("prefix", o.Prefix, errors.New("must be non-empty and without braces"))
	}
	fencing, err := u.Bool("fencing", true)
	if err != nil {
		return nil, err
	}
	o.NoFencing = !fencing
	if o.FenceTTL, err = u.Duration("fence_ttl", DefaultFenceTTL); err != nil {
		return nil, err
	}
	if o.FenceTTL < time.Millisecond {
		return nil, u.Err("fence_ttl", u.String("fence_ttl", ""), errors.New("must be at least 1ms"))
	}
	tlsConfig, err := u.TLS(false)
	if err != nil {
		return nil, err
	}
	if err := u.Unknown(); err != nil {
		return nil, err
	}

	user := u.User.Username() // nil-safe: "" without user information
	pass, _ := u.User.Password()
	clients := make([]redis.UniversalClient, len(addrs))
	for i, a := range addrs {
		clients[i] = redis.NewClient(&redis.Options{
			Addr:      a,
			Username:  user,
			Password:  pass,
			TLSConfig: tlsConfig,
			// The node timeout must bound socket reads too.
			ContextTimeoutEnabled: true,
			// A retry rarely fits in the node timeout; a dead node should
			// fail at once, not after the timeout.
			MaxRetries:    -1,
			DialerRetries: 1,
		})
	}
	d, err := NewDriver(clients, &o)
	if err != nil {
		for _, c := range clients {
			_ = c.Close()
		}
		return nil, err
	}
	d.ownClients = true
	return d, nil
}

// nodeAddrs parses the URL's comma-separated host list.
func nodeAddrs(u driver.URL) ([]string, error) {
	if u.Host == "" {
		return nil, u.Err("host", "", errors.New("no nodes: want redlock://host:port,host:port[,host:port...]"))
	}
	addrs, err := redisutil.HostList(u, strings.Split(u.Host, ","), DefaultPort, "node listed twice (it would vote twice)")
	if err != nil {
		return nil, err
	}
	if len(addrs) > MaxNodes {
		return nil, u.Err("host", u.Host, fmt.Errorf("%d nodes, more than %d", len(addrs), MaxNodes))
	}
	return addrs, nil
}
