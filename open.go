package dlock

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"
	"sync"

	"github.com/dlockgo/dlock/driver"
)

var registry struct {
	sync.RWMutex
	m map[string]driver.Opener
}

// Register makes a backend available to Open under the URL scheme. Backend
// packages call it from init, so that importing a backend (often for its
// side effect alone, import _ ".../redislock") is enough to open its URLs.
// Register panics if scheme is registered twice or opener is nil: both are
// programming errors.
func Register(scheme string, opener driver.Opener) {
	registry.Lock()
	defer registry.Unlock()
	if opener == nil {
		panic("dlock: Register opener is nil")
	}
	if registry.m == nil {
		registry.m = map[string]driver.Opener{}
	}
	if _, dup := registry.m[scheme]; dup {
		panic("dlock: Register called twice for scheme " + scheme)
	}
	registry.m[scheme] = opener
}

// parseURL parses rawURL as url.Parse does, and also a URL whose authority
// lists several hosts, such as redlock://[::1]:7001,[::1]:7002 or
// redlock://h1:6379,h2 (which url.Parse rejects, taking what follows the
// last colon for the port), with Host set to the list, for the backend.
func parseURL(rawURL string) (*url.URL, error) {
	scheme, rest, ok := strings.Cut(rawURL, "://")
	if !ok {
		return url.Parse(rawURL)
	}
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	authority := rest[:end]
	hostStart := strings.LastIndexByte(authority, '@') + 1
	hosts := authority[hostStart:]
	if !strings.Contains(hosts, ",") {
		return url.Parse(rawURL)
	}
	for h := range strings.SplitSeq(hosts, ",") {
		if strings.ContainsAny(h, " \t\n\r%") {
			return nil, fmt.Errorf("parse %q: invalid character in host %q", rawURL, h)
		}
	}
	// Parse the rest with one stand-in host, then put the list back.
	u, err := url.Parse(scheme + "://" + authority[:hostStart] + "multi.invalid" + rest[end:])
	if err != nil {
		return nil, err
	}
	u.Host = hosts
	return u, nil
}

// Schemes returns the registered URL schemes, sorted.
func Schemes() []string {
	registry.RLock()
	defer registry.RUnlock()
	return slices.Sorted(maps.Keys(registry.m))
}

// Open returns a Locker for the backend that rawURL names, such as
// "redis://127.0.0.1:6379" or "mem://". The backend's package must be
// imported (it registers its scheme). Each backend documents its URL and
// parameters; every backend also accepts these, which set the Locker's
// defaults:
//
//	ttl=30s        the lock's time to live (WithTTL)
//	renew=true     automatic renewal (WithAutoRenew)
//	poll_min=2ms   the bounds of the waits between tries, on backends that
//	poll_max=250ms poll (WithBackoff(ExponentialBackoff(poll_min, poll_max)))
//
// Options given to Open take precedence over URL parameters. An unknown
// scheme is an error listing the registered ones; a bad parameter is a
// *ParamError naming it.
func Open(ctx context.Context, rawURL string, opts ...Option) (*Locker, error) {
	u, err := parseURL(rawURL)
	if err != nil {
		return nil, fmt.Errorf("dlock: Open: %w", err)
	}
	if u.Scheme == "" {
		return nil, fmt.Errorf("dlock: Open %q: no scheme; registered: %s", rawURL, strings.Join(Schemes(), ", "))
	}
	registry.RLock()
	opener := registry.m[u.Scheme]
	registry.RUnlock()
	if opener == nil {
		return nil, fmt.Errorf("dlock: Open: unknown scheme %q; registered: %s (is the backend package imported?)",
			u.Scheme, strings.Join(Schemes(), ", "))
	}
	du := driver.NewURL(u)
	du.Logger = config{}.with(opts).logger
	var urlOpts []Option
	if du.Has("ttl") {
		ttl, err := du.Duration("ttl", DefaultTTL)
		if err != nil {
			return nil, err
		}
		if ttl < MinTTL {
			return nil, du.Err("ttl", du.String("ttl", ""), fmt.Errorf("below the minimum %v", MinTTL))
		}
		urlOpts = append(urlOpts, WithTTL(ttl))
	}
	if du.Has("renew") {
		on, err := du.Bool("renew", true)
		if err != nil {
			return nil, err
		}
		urlOpts = append(urlOpts, WithAutoRenew(on))
	}
	if du.Has("poll_min") || du.Has("poll_max") {
		b, err := pollBounds(du)
		if err != nil {
			return nil, err
		}
		urlOpts = append(urlOpts, WithBackoff(b))
	}
	d, err := opener(ctx, du)
	if err != nil {
		return nil, err
	}
	return newLocker(d, u.Scheme, append(urlOpts, opts...))
}

// pollBounds reads the URL parameters poll_min and poll_max into an
// ExponentialBackoff.
func pollBounds(du driver.URL) (Backoff, error) {
	lo, err := du.Duration("poll_min", DefaultMinBackoff)
	if err != nil {
		return nil, err
	}
	hi, err := du.Duration("poll_max", max(DefaultMaxBackoff, lo))
	if err != nil {
		return nil, err
	}
	switch {
	case lo <= 0:
		return nil, du.Err("poll_min", du.String("poll_min", ""), errors.New("not above zero"))
	case hi < lo:
		return nil, du.Err("poll_max", du.String("poll_max", ""), fmt.Errorf("below poll_min %v", lo))
	}
	return ExponentialBackoff(lo, hi), nil
}
