package mysqllock

import (
	"context"
	"crypto/tls"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
)

// DefaultAddr is the server a mysql:// URL without a host reaches.
const DefaultAddr = "127.0.0.1:3306"

// OpenMaxIdleConns is how many idle connections the pool of a driver
// opened from a URL keeps (database/sql's default is 2): every acquisition
// checks one out, and a new one costs a handshake.
const OpenMaxIdleConns = 32

// openTimeout bounds Open's ping (dial, handshake, ping) unless the URL's
// timeout, of the dial only, is longer. Tests shorten it.
var openTimeout = 10 * time.Second

// driverParams are the go-sql-driver DSN parameters a mysql:// URL passes
// through: those of the connection only (transport, authentication,
// character set). Those that change what statements do (multiStatements,
// interpolateParams, parseTime, loc, clientFoundRows, allowAllFiles...)
// and server variables are refused.
var driverParams = []string{
	"allowCleartextPasswords", "allowFallbackToPlaintext", "allowNativePasswords", "allowOldPasswords",
	"charset", "checkConnLiveness", "collation", "compress", "connectionAttributes",
	"maxAllowedPacket", "readTimeout", "rejectReadOnly", "serverPubKey", "timeout", "tls", "writeTimeout",
}

// open is the Opener of mysql:// URLs (see the package documentation).
func open(ctx context.Context, u driver.URL) (driver.Driver, error) {
	var o Options
	o.Table = u.String("table", DefaultTable)
	if u.Has("prefix") {
		o.Prefix = u.String("prefix", DefaultPrefix)
		o.NoPrefix = o.Prefix == ""
	}
	var err error
	if o.KeepAlive, err = u.Duration("keepalive", DefaultKeepAlive); err != nil {
		return nil, err
	}
	if o.KeepAlive == 0 {
		return nil, u.Err("keepalive", "0s", errors.New("must be positive"))
	}
	if o.SessionLocks, err = u.Int("session_locks", DefaultSessionLocks); err != nil {
		return nil, err
	}
	if o.SessionLocks < 1 {
		return nil, u.Err("session_locks", u.String("session_locks", ""), errors.New("must be at least 1"))
	}
	if o.WaitStep, err = u.Duration("wait_step", DefaultWaitStep); err != nil {
		return nil, err
	}
	if o.WaitStep < time.Second {
		return nil, u.Err("wait_step", o.WaitStep.String(), errors.New("below one second"))
	}
	socket := u.String("socket", "")
	// cacert, cert and key name files of a TLS configuration of our own
	// (go-sql-driver's tls only names one in code); tls is true or absent.
	var tlsConf *tls.Config
	if slices.ContainsFunc(driver.TLSFileParams, u.Has) {
		if v := u.String("tls", "true"); v != "true" {
			return nil, u.Err("tls", v, errors.New("with cacert, cert, key, server_name or insecure_skip_verify, tls must be true or left out"))
		}
		if tlsConf, err = u.TLS(true); err != nil {
			return nil, err
		}
	}
	pass := url.Values{}
	for _, k := range driverParams {
		if !u.Has(k) || k == "tls" && tlsConf != nil {
			continue
		}
		v := u.String(k, "")
		if _, err := mysql.ParseDSN("/?" + url.Values{k: {v}}.Encode()); err != nil {
			return nil, u.Err(k, v, err)
		}
		pass.Set(k, v)
	}
	if err := u.Unknown(); err != nil {
		return nil, err
	}
	cfg, err := config(u, socket, pass)
	if err != nil {
		return nil, err
	}
	if tlsConf != nil {
		cfg.TLS = tlsConf // go-sql-driver checks the certificate against the host
	}
	// The pool is ours: its wait_timeout is the TTL's (ExclusivePool).
	o.ExclusivePool = true
	ttl, err := u.Duration("ttl", dlock.DefaultTTL)
	if err != nil {
		return nil, err
	}
	timeout := sessionTimeout(ttl)
	cfg.Params = map[string]string{"wait_timeout": strconv.FormatInt(int64(timeout/time.Second), 10)}
	if _, err := quoteTable(o.Table); err != nil {
		return nil, u.Err("table", o.Table, err)
	}
	if cfg.DBName == "" && !strings.Contains(o.Table, ".") {
		return nil, u.Err("path", u.Path, errors.New("no database: want mysql://host/database, or table=database.table"))
	}
	if err := checkPrefix(o.Prefix); err != nil {
		return nil, u.Err("prefix", o.Prefix, err)
	}
	if cfg.ReadTimeout > 0 && o.WaitStep >= cfg.ReadTimeout {
		// A wait must end, and be issued again, before the read times out.
		o.WaitStep = max(cfg.ReadTimeout/2, time.Second)
	}
	o.Sockets = WatchSockets(cfg) // the pool is the driver's: watch its sockets
	c, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("mysqllock: open: %w", err)
	}
	db := sql.OpenDB(c)
	db.SetMaxIdleConns(OpenMaxIdleConns)
	// The pool closes idle connections before the server would.
	db.SetConnMaxIdleTime(timeout / 2)
	// A ping: a wrong address or password fails Open, not the first Acquire.
	wait := max(cfg.Timeout, openTimeout)
	pctx, cancel := context.WithTimeout(ctx, wait)
	err = db.PingContext(pctx)
	cancel()
	if err != nil {
		_ = db.Close()
		return nil, openError(ctx, cfg.Addr, wait, err)
	}
	d, err := NewDriver(db, &o)
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	d.own = true
	return d, nil
}

// config builds the go-sql-driver configuration of a mysql:// URL.
func config(u driver.URL, socket string, pass url.Values) (*mysql.Config, error) {
	cfg := mysql.NewConfig()
	if u.User != nil {
		cfg.User = u.User.Username()
		cfg.Passwd, _ = u.User.Password()
	}
	switch {
	case socket != "" && u.Host != "":
		return nil, u.Err("socket", socket, errors.New("a URL with a socket takes no host: mysql://user@/database?socket=/path"))
	case socket != "":
		cfg.Net, cfg.Addr = "unix", socket
	case u.Host == "":
		cfg.Net, cfg.Addr = "tcp", DefaultAddr
	default:
		host, port := u.Hostname(), u.Port()
		if host == "" {
			return nil, u.Err("host", u.Host, errors.New("no host name"))
		}
		if port == "" {
			port = "3306"
		}
		cfg.Net, cfg.Addr = "tcp", net.JoinHostPort(host, port)
	}
	db := strings.TrimPrefix(u.Path, "/")
	if strings.Contains(db, "/") {
		return nil, u.Err("path", u.Path, errors.New("the path is one database name: mysql://host/database"))
	}
	cfg.DBName = db
	if len(pass) == 0 {
		return cfg, nil
	}
	dsn := cfg.FormatDSN()
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	full, err := mysql.ParseDSN(dsn + sep + pass.Encode())
	if err != nil {
		return nil, fmt.Errorf("mysqllock: open: %w", err)
	}
	return full, nil
}

// openError names what happened to Open's first connection: the server
// refused it (a wrong password, an unknown database), could not be
// reached, or did not complete the handshake in time, or the caller's
// context ended.
func openError(ctx context.Context, addr string, wait time.Duration, err error) error {
	if me, ok := errors.AsType[*mysql.MySQLError](err); ok {
		what := "refused the connection"
		switch me.Number {
		case erAccessDenied, erDBAccessDenied, erAccessDeniedNoPassword:
			what = "refused the credentials"
		case erBadDB:
			what = "has no such database"
		}
		return fmt.Errorf("mysqllock: open: the server at %s %s: %w", addr, what, err)
	}
	if ctx.Err() != nil {
		return fmt.Errorf("mysqllock: open: connecting to the server at %s: %w (the context ended first)", addr, err)
	}
	if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("mysqllock: open: the server at %s did not complete the connection within %v: %w", addr, wait, err)
	}
	if _, ok := errors.AsType[*net.OpError](err); ok {
		return fmt.Errorf("mysqllock: open: cannot reach the server at %s: %w", addr, err)
	}
	return fmt.Errorf("mysqllock: open: the connection to the server at %s failed: %w", addr, err)
}

// Server error numbers that Open names (the same on MySQL and MariaDB).
const (
	erDBAccessDenied = 1044 // ER_DBACCESS_DENIED_ERROR
	erAccessDenied   = 1045 // ER_ACCESS_DENIED_ERROR
	erBadDB          = 1049 // ER_BAD_DB_ERROR
	// ER_ACCESS_DENIED_NO_PASSWORD_ERROR: MariaDB's answer to some
	// unknown users and to auth plugins that refuse (unix_socket).
	erAccessDeniedNoPassword = 1698
)
