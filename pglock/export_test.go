package pglock

import (
	"context"
	"time"
)

// Crash makes the driver stop as a crashed process would: every one of its
// connections is cut (the socket closed, no Terminate message), so its
// sessions end without unlocking anything, and it makes no new ones.
func Crash(d *Driver) {
	d.pool.Hooks.Refuse.Store(true)
	d.mu.Lock()
	var conns []*conn
	conns = append(conns, d.idle...)
	conns = append(conns, d.pool.ConnsLocked()...)
	for c := range d.waiting {
		conns = append(conns, c)
	}
	d.mu.Unlock()
	for _, c := range conns {
		_ = c.pg.PgConn().Conn().Close()
	}
}

// HolderPID returns the server process id of the session holding the lock
// of owner, or 0.
func HolderPID(d *Driver, owner string) uint32 {
	if h := d.pool.Held(owner); h != nil {
		return h.S.C.pid()
	}
	return 0
}

// Idle returns the number of idle connections.
func Idle(d *Driver) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.idle)
}

// Setting returns a run-time setting of a session of the driver.
func Setting(ctx context.Context, d *Driver, name string) (string, error) {
	c, _, err := d.get(ctx)
	if err != nil {
		return "", err
	}
	defer d.put(c)
	var v string
	err = c.pg.QueryRow(ctx, "SELECT current_setting($1)", name).Scan(&v)
	return v, err
}

// IdlePIDs returns the server process ids of the idle connections.
func IdlePIDs(d *Driver) []uint32 {
	d.mu.Lock()
	defer d.mu.Unlock()
	var pids []uint32
	for _, c := range d.idle {
		pids = append(pids, c.pid())
	}
	return pids
}

// Occupy takes the use of the session holding owner's lock, as a
// keep-alive check stuck on a silent server would, until the returned
// function is called.
func Occupy(d *Driver, owner string) (free func()) {
	return d.pool.Held(owner).S.Occupy()
}

// NoKeeper stops the driver from starting the keeper goroutine of the
// locks it grants from now on (on is true), so that only Check can learn
// of their loss: a holder whose goroutines have not run yet.
func NoKeeper(d *Driver, on bool) { d.pool.Hooks.NoKeeper.Store(on) }

// TimerKeeper makes the keepers of the locks the driver grants from now
// on ping on their timer alone (on is true), without waiting for the
// socket to speak: a keeper whose keep-alive check falls due before it
// has seen the server's close, as at a holder's resume after a pause.
func TimerKeeper(d *Driver, on bool) { d.pool.Hooks.TimerKeeper.Store(on) }

// ConnectTimeout returns the connect timeout of the driver's connections.
func ConnectTimeout(d *Driver) time.Duration { return d.cfg.ConnectTimeout }

// SetDefaultConnectTimeout sets the connect timeout a configuration
// without one gets, and returns a function that restores the default.
func SetDefaultConnectTimeout(t time.Duration) (restore func()) {
	old := connectTimeout
	connectTimeout = t
	return func() { connectTimeout = old }
}

// Sessions returns the number of sessions holding locks.
func Sessions(d *Driver) int {
	n, _ := d.pool.Len()
	return n
}

// pid returns the server process id of c's session.
func (c *conn) pid() uint32 { return c.pg.PgConn().PID() }
