package pglock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"

	"github.com/dlockgo/dlock/internal/bg"
	"github.com/dlockgo/dlock/internal/sockwatch"
)

// cancelGrace bounds the wait for a cancel to take before the cut instead.
const cancelGrace = 2 * time.Second

// closeTimeout bounds a connection's polite close (a Terminate message).
const closeTimeout = time.Second

// A conn is one of the driver's own connections: idle (in Driver.idle,
// holding no advisory lock), or in the hands of exactly one acquisition
// or session. Never shared otherwise: advisory locks are re-entrant
// within a session, so a second user could take a lock the first holds.
type conn struct {
	d   *Driver
	pg  *pgx.Conn
	w   *watcher
	raw net.Conn // the socket as dialled, under any TLS (newSockWatch)
	// For a session: timeout bounds a ping; reused: used before.
	timeout time.Duration
	reused  bool
}

// watcher is the connection's context watcher handler, what pgx does when
// a running query's context ends: for a lock wait (wait set), a cancel
// request, so that the request leaves the lock's queue, cutting the
// connection only if the server has not answered within cancelGrace; else
// an interrupted read at once. fired records it: the driver then closes
// the connection, so that a cancel request in flight never hits a later
// query, and what the interrupted statement took dies with the session.
type watcher struct {
	pc    *pgconn.PgConn
	bg    *bg.Group // the driver's: Close waits for the cancel request
	wait  atomic.Bool
	fired atomic.Bool
}

// HandleCancel runs when a query's context ends (see watcher).
func (w *watcher) HandleCancel(context.Context) {
	w.fired.Store(true)
	nc := w.pc.Conn()
	if !w.wait.Load() {
		_ = nc.SetDeadline(time.Now())
		return
	}
	_ = nc.SetDeadline(time.Now().Add(cancelGrace))
	w.bg.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), cancelGrace)
		defer cancel()
		_ = w.pc.CancelRequest(ctx)
	})
}

// HandleUnwatchAfterCancel clears the deadline HandleCancel set.
func (w *watcher) HandleUnwatchAfterCancel() {
	_ = w.pc.Conn().SetDeadline(time.Time{})
}

// dial opens a connection and prepares its session.
func (d *Driver) dial(ctx context.Context) (*conn, error) {
	if d.pool.Hooks.Refuse.Load() {
		return nil, errors.New("pglock: connect: refused (crashed)")
	}
	c := &conn{d: d}
	cfg := d.cfg.Copy()
	// Client-side TCP keep-alive too, so that a wait on a silent server
	// fails within about four keep-alive intervals (pgx's dialer keeps
	// Go's 15s + 9 × 15s). Once connected, pgx dials only for cancel
	// requests, whose sockets are not the session's.
	dialFunc := cfg.DialFunc
	var connected atomic.Bool
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		nc, err := dialFunc(ctx, network, addr)
		if tc, ok := nc.(*net.TCPConn); ok {
			_ = tc.SetKeepAliveConfig(net.KeepAliveConfig{Enable: true, Idle: d.keepalive, Interval: d.keepalive, Count: 3})
		}
		if err == nil {
			nc = sockwatch.Follow(nc, frames) // pgx reads through the watch (newSockWatch)
		}
		if err == nil && !connected.Load() {
			c.raw = nc // the last dial of the connect is the one pgx keeps
		}
		return nc, err
	}
	cfg.BuildContextWatcherHandler = func(pc *pgconn.PgConn) ctxwatch.Handler {
		c.w = &watcher{pc: pc, bg: &d.bg}
		return c.w
	}
	pg, err := pgx.ConnectConfig(ctx, cfg)
	connected.Store(true)
	if err != nil {
		if ctx.Err() == nil && pgconn.Timeout(err) {
			// The connect timeout, not the caller's context, ended it.
			return nil, fmt.Errorf("pglock: connect: the server did not complete the connection within the connect timeout (%v; connect_timeout in the URL): %w", cfg.ConnectTimeout, err)
		}
		return nil, fmt.Errorf("pglock: connect: %w", err)
	}
	c.pg = pg
	if c.w == nil { // pgx did not install the driver's handler
		c.close()
		return nil, errors.New("pglock: connect: the context watcher handler was not installed")
	}
	if sql, args := d.sessionSetup(pg.PgConn()); sql != "" {
		// One round trip with the simple protocol; the values are ours.
		if _, err := pg.Exec(ctx, sql, append([]any{pgx.QueryExecModeSimpleProtocol}, args...)...); err != nil {
			c.close()
			return nil, fmt.Errorf("pglock: set up the session: %w", err)
		}
	}
	return c, nil
}

// sessionSetup returns the statement setting a new session's server-side
// timeouts (see Options.NoServerKeepalive), or "" for none.
func (d *Driver) sessionSetup(pc *pgconn.PgConn) (string, []any) {
	if d.noServerKeepalive {
		return "", nil
	}
	secs := max(1, int((d.keepalive+time.Second-1)/time.Second))
	settings := []struct {
		name, value string
		since       int // server major version
	}{
		{"tcp_keepalives_idle", strconv.Itoa(secs) + "s", 0},
		{"tcp_keepalives_interval", strconv.Itoa(secs) + "s", 0},
		{"tcp_keepalives_count", "3", 0},
		{"tcp_user_timeout", strconv.Itoa(4*secs) + "s", 12},
		{"client_connection_check_interval", strconv.Itoa(secs) + "s", 14},
	}
	major := serverMajor(pc.ParameterStatus("server_version"))
	var sel []string
	var args []any
	for _, s := range settings {
		if _, given := d.cfg.RuntimeParams[s.name]; given || major < s.since {
			continue
		}
		args = append(args, s.name, s.value)
		sel = append(sel, fmt.Sprintf("set_config($%d, $%d, false)", len(args)-1, len(args)))
	}
	if len(sel) == 0 {
		return "", nil
	}
	return "SELECT " + strings.Join(sel, ", "), args
}

// serverMajor returns server_version's major ("15.20 (Debian...)": 15), or 0.
func serverMajor(v string) int {
	end := 0
	for end < len(v) && '0' <= v[end] && v[end] <= '9' {
		end++
	}
	n, _ := strconv.Atoi(v[:end])
	return n
}

// close closes c: the server frees its locks once it reads the close
// (after the running statement, if any).
func (c *conn) close() {
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	_ = c.pg.Close(ctx)
}

// begin prepares c for one query, which may block on a lock if wait.
func (c *conn) begin(wait bool) {
	c.w.wait.Store(wait)
	c.w.fired.Store(false)
}

// cancelSent reports whether the last query, a wait, sent a cancel request.
func (c *conn) cancelSent() bool { return c.w.wait.Load() && c.w.fired.Load() }

// get returns an idle connection (reused is true), or a new one.
func (d *Driver) get(ctx context.Context) (c *conn, reused bool, err error) {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil, false, errClosed
	}
	for len(d.idle) > 0 {
		c := d.idle[len(d.idle)-1]
		d.idle = d.idle[:len(d.idle)-1]
		if !c.pg.IsClosed() {
			d.mu.Unlock()
			return c, true, nil
		}
	}
	d.mu.Unlock()
	c, err = d.dial(ctx)
	return c, false, err
}

// withConn runs f on an idle or new connection, once more when a reused
// one had died (server restart, idle timeout). A connection f fails on is
// closed; the error is errClosed, ctx's, or f's with a hint, through wrap.
func (d *Driver) withConn(ctx context.Context, f func(c *conn) error, wrap func(error) error) error {
	for retried := false; ; retried = true {
		c, reused, err := d.get(ctx)
		if err != nil {
			return err
		}
		c.begin(false)
		if err = f(c); err == nil {
			d.put(c)
			return nil
		}
		dead := c.pg.IsClosed()
		c.close()
		switch {
		case d.isClosed():
			return errClosed
		case ctx.Err() != nil:
			return ctx.Err()
		case reused && !retried && dead:
			continue
		}
		return wrap(hint(err, d.st.table))
	}
}

// put makes c, holding no lock, idle again, or closes it if the driver is
// closed or has enough idle connections.
func (d *Driver) put(c *conn) {
	if c.pg.IsClosed() {
		return
	}
	d.mu.Lock()
	if !d.closed && len(d.idle) < d.maxIdle {
		d.idle = append(d.idle, c)
		c = nil
	}
	d.mu.Unlock()
	if c != nil {
		c.close()
	}
}
