package pglock

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
)

func init() {
	dlock.Register("postgres", open)
	dlock.Register("postgresql", open)
}

// ownParams (pglock's) and driver.OpenParams (dlock.Open's) do not go to
// pgx.
var ownParams = []string{"table", "keepalive", "max_idle", "session_locks", "migrate", "server_keepalive"}

// open is the Opener of postgres:// and postgresql:// URLs.
func open(ctx context.Context, u driver.URL) (driver.Driver, error) {
	var o Options
	o.Table = u.String("table", DefaultTable)
	if err := checkTable(o.Table); err != nil {
		return nil, u.Err("table", o.Table, err)
	}
	var err error
	if o.Keepalive, err = u.Duration("keepalive", DefaultKeepalive); err != nil {
		return nil, err
	}
	if o.Keepalive < MinKeepalive {
		return nil, u.Err("keepalive", u.String("keepalive", ""), fmt.Errorf("below the minimum %v", MinKeepalive))
	}
	if o.MaxIdle, err = u.Int("max_idle", DefaultMaxIdle); err != nil {
		return nil, err
	}
	if o.MaxIdle < 0 {
		return nil, u.Err("max_idle", u.String("max_idle", ""), errors.New("must not be negative"))
	} else if o.MaxIdle == 0 {
		o.MaxIdle = -1 // none, as the URL says
	}
	if o.SessionLocks, err = u.Int("session_locks", DefaultSessionLocks); err != nil {
		return nil, err
	}
	if o.SessionLocks < 1 {
		return nil, u.Err("session_locks", u.String("session_locks", ""), errors.New("must be at least 1"))
	}
	migrate, err := u.Bool("migrate", true)
	if err != nil {
		return nil, err
	}
	o.NoMigrate = !migrate
	serverKeepalive, err := u.Bool("server_keepalive", true)
	if err != nil {
		return nil, err
	}
	o.NoServerKeepalive = !serverKeepalive

	// The rest is pgx's: connection parameters, and any other parameter as
	// a run-time setting, which the server checks when the driver connects.
	rest := *u.URL
	q := rest.Query()
	for _, k := range slices.Concat(ownParams, driver.OpenParams) {
		q.Del(k)
	}
	rest.RawQuery = pgxQuery(q)
	cfg, err := pgx.ParseConfig(rest.String())
	if err != nil {
		return nil, parseError(u, &rest, q, err)
	}
	d, err := NewDriver(ctx, cfg, &o)
	if err != nil {
		return nil, settingError(u, q, err)
	}
	return d, nil
}

// pgxQuery encodes q for pgx, which unescapes a URL's query as a path
// (a "+" stays a "+"): spaces as %20, not as url.Values.Encode's "+",
// which would turn options=-c%20x%3Dy into a setting named "+x". Encode
// escapes a literal "+" as %2B, so every "+" it leaves was a space.
func pgxQuery(q url.Values) string {
	return strings.ReplaceAll(q.Encode(), "+", "%20")
}

// parseError names the parameter that pgx fails to parse alone, or the URL.
func parseError(u driver.URL, rest *url.URL, q url.Values, err error) error {
	for _, k := range slices.Sorted(maps.Keys(q)) {
		one := *rest
		one.RawQuery = pgxQuery(url.Values{k: q[k]})
		if _, e := pgx.ParseConfig(one.String()); e != nil {
			return u.Err(k, q.Get(k), err)
		}
	}
	return u.Err("url", "", err)
}

// settingError turns the server's refusal of a run-time setting the URL
// gave (an unknown setting, SQLSTATE 42704, or a bad value, 22023, the
// message naming it in double quotes) into a *driver.ParamError naming it.
func settingError(u driver.URL, q url.Values, err error) error {
	pe, ok := errors.AsType[*pgconn.PgError](err)
	if !ok || (pe.Code != codeUndefinedObject && pe.Code != codeInvalidParamValue) {
		return err
	}
	_, after, ok := strings.Cut(pe.Message, `"`)
	if !ok {
		return err
	}
	name, _, ok := strings.Cut(after, `"`)
	if !ok || !q.Has(name) {
		return err
	}
	return u.Err(name, q.Get(name), err)
}
