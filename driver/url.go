package driver

import (
	"errors"
	"log/slog"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// URL is a backend's URL with helpers that parse its query parameters and
// report every mistake as a *ParamError naming the parameter.
type URL struct {
	*url.URL
	// Logger is the logger given to dlock.Open with dlock.WithLogger, for
	// the driver's own messages (session events, configuration warnings);
	// nil when none was given.
	Logger *slog.Logger
	q      url.Values
	used   map[string]bool
}

// OpenParams are the parameters dlock.Open reads itself, for every
// backend, before the backend's Opener sees the URL; a backend that hands
// its URL's query to a client library leaves them out.
var OpenParams = []string{"ttl", "renew", "poll_min", "poll_max"}

// NewURL wraps u. The query is parsed once.
func NewURL(u *url.URL) URL {
	return URL{URL: u, q: u.Query(), used: map[string]bool{}}
}

// Has reports whether parameter name was given.
func (u URL) Has(name string) bool { return u.q.Has(name) }

// String returns parameter name, or def when it is absent.
func (u URL) String(name, def string) string {
	u.used[name] = true
	if !u.q.Has(name) {
		return def
	}
	return u.q.Get(name)
}

// param returns parameter name parsed by parse, or def when it is absent;
// a value parse refuses is a *ParamError, saying "not "+what if what is
// set, else parse's error.
func param[T any](u URL, name string, def T, parse func(string) (T, error), what string) (T, error) {
	u.used[name] = true
	if !u.q.Has(name) {
		return def, nil
	}
	v := u.q.Get(name)
	t, err := parse(v)
	if err != nil && what != "" {
		err = errors.New("not " + what)
	}
	if err != nil {
		return def, u.Err(name, v, err)
	}
	return t, nil
}

// Duration returns parameter name parsed by time.ParseDuration, or def.
func (u URL) Duration(name string, def time.Duration) (time.Duration, error) {
	return param(u, name, def, func(v string) (time.Duration, error) {
		d, err := time.ParseDuration(v)
		if err == nil && d < 0 {
			err = errors.New("must not be negative")
		}
		return d, err
	}, "")
}

// PositiveDuration is Duration for a parameter that must be above zero.
func (u URL) PositiveDuration(name string, def time.Duration) (time.Duration, error) {
	d, err := u.Duration(name, def)
	if err == nil && d == 0 {
		err = u.Err(name, u.String(name, ""), errors.New("must be positive"))
	}
	return d, err
}

// Int returns parameter name as a base-10 integer, or def.
func (u URL) Int(name string, def int) (int, error) {
	return param(u, name, def, strconv.Atoi, "an integer")
}

// Bool returns parameter name parsed by strconv.ParseBool, or def.
func (u URL) Bool(name string, def bool) (bool, error) {
	return param(u, name, def, strconv.ParseBool, "a boolean")
}

// Unknown returns a *ParamError for the first (in sorted order) parameter
// no helper has read, or nil. Openers call it last.
func (u URL) Unknown() error {
	for _, k := range slices.Sorted(maps.Keys(u.q)) {
		if !u.used[k] {
			return &ParamError{Scheme: u.Scheme, Param: k, Value: u.q.Get(k), Err: errors.New("unknown parameter")}
		}
	}
	return nil
}

// Err returns a *ParamError for the named parameter or URL part.
func (u URL) Err(param, value string, err error) error {
	if secretParam(param) {
		value = "xxxxx"
	}
	return &ParamError{Scheme: u.Scheme, Param: param, Value: value, Err: err}
}

// Redacted returns the URL with its secrets hidden, for messages: the
// user information's password and the value of every query parameter
// whose name holds "password", "secret" or "token" become "xxxxx".
func (u URL) Redacted() string { return Redact(u.URL) }

// Redact returns u as text with its secrets hidden, as URL.Redacted does.
func Redact(u *url.URL) string {
	if u == nil {
		return ""
	}
	c := *u
	if c.User != nil {
		if _, has := c.User.Password(); has {
			c.User = url.UserPassword(c.User.Username(), "xxxxx")
		}
	}
	if c.RawQuery != "" {
		q := c.Query()
		changed := false
		for k, vs := range q {
			if secretParam(k) {
				for i := range vs {
					vs[i] = "xxxxx"
				}
				changed = true
			}
		}
		if changed {
			c.RawQuery = q.Encode()
		}
	}
	return c.String()
}

// secretParam reports whether a query parameter's value is a secret.
func secretParam(name string) bool {
	n := strings.ToLower(name)
	return strings.Contains(n, "password") || strings.Contains(n, "secret") || strings.Contains(n, "token")
}
