package mysqllock

import (
	"cmp"
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/dlockgo/dlock/driver"
)

// A cancelled wait's KILL QUERY has killTimeout to go, the wait killGrace
// to return, before the connection is closed instead.
const (
	killTimeout = time.Second
	killGrace   = time.Second
)

// cleanupTimeout bounds the RELEASE_LOCK of an abandoned acquisition.
const cleanupTimeout = time.Second

// TryLock implements driver.Driver: GET_LOCK with a timeout of 0 on one of
// the driver's sessions with room, then the token on it. When another
// connection holds the lock, it returns a *driver.HeldError. ctx bounds
// the wait for a session and the checkout of a connection, not the
// statements on a shared session (see session).
func (d *Driver) TryLock(ctx context.Context, r driver.Request) (driver.Grant, error) {
	return d.acquire(ctx, r, false)
}

// Lock implements driver.Waiter. It first tries the lock as TryLock does;
// when another connection holds it, it waits on the server (GET_LOCK with
// a timeout) on a connection of its own, which then becomes a session
// holding the lock; ctx ends the wait with a KILL QUERY (see wait), so that
// nothing stays queued. Of the driver's Lock calls for one name, one at a
// time tries and waits; the others queue in the process in order of
// arrival, with no connection, and leave at once when their ctx ends.
func (d *Driver) Lock(ctx context.Context, r driver.Request) (driver.Grant, error) {
	return d.acquire(ctx, r, true)
}

func (d *Driver) acquire(ctx context.Context, r driver.Request, wait bool) (driver.Grant, error) {
	q, err := d.resolve(r)
	if err != nil {
		return driver.Grant{}, err
	}
	if err := ctx.Err(); err != nil {
		return driver.Grant{}, err
	}
	if err := d.begin(); err != nil {
		return driver.Grant{}, err
	}
	defer d.wg.Done()
	if wait {
		// One waiter per name at the server; the others queue here, with
		// no connection, not to pass max_connections.
		g, err := d.gates.Enter(ctx, q.name, d.ctx.Done())
		if err != nil {
			return driver.Grant{}, d.cancelled(ctx)
		}
		defer g.Leave(struct{}{})
	}
	g, err := d.tryOn(ctx, q)
	if !wait || !errors.Is(err, driver.ErrNotAcquired) {
		return g, err
	}
	return d.waitOn(ctx, q)
}

// tryOn runs GET_LOCK(key, 0) on a session, then the token, and makes the
// session the lock's holder when it got the lock.
func (d *Driver) tryOn(ctx context.Context, q lockReq) (driver.Grant, error) {
	for retried := false; ; retried = true {
		s, err := d.pool.Session(ctx, q.timeout, q.key)
		if err != nil {
			return driver.Grant{}, err
		}
		fresh := s.Fresh()
		var got sql.NullInt64
		if fresh {
			err = d.openSession(s.C, q.key, &got)
		} else {
			err = s.C.query("SELECT GET_LOCK("+literal(q.key)+", 0)", &got)
		}
		switch {
		case err == nil && got.Valid && got.Int64 == 1:
			tok, err := s.C.bump(q.name)
			if err != nil {
				letGo(s, q.key)
				return driver.Grant{}, err
			}
			return d.grantOn(s, q, tok)
		case err == nil && got.Valid:
			s.Unreserve(q.key)
			return driver.Grant{}, &driver.HeldError{Name: q.name}
		case err == nil:
			err = errNullLock
		}
		// Failed, or in an unknown state: end the session, freeing its locks.
		s.EndLost(fmt.Errorf("mysqllock: the connection holding the lock failed: %w", err))
		switch {
		case d.isClosed():
			return driver.Grant{}, driver.ErrClosed
		case ctx.Err() != nil:
			return driver.Grant{}, ctx.Err()
		case !fresh && !retried:
			// A shared connection that had died (restart, kill): try another.
			continue
		}
		return driver.Grant{}, fmt.Errorf("mysqllock: GET_LOCK %q: %w", q.name, err)
	}
}

// openSession sets up a fresh session's connection c with its first
// GET_LOCK(key, 0): the wait_timeout goes down to the lock's TTL (whole
// seconds) before the lock can be granted, so that the server frees a
// silent holder's locks (a dead host, a partition) after the TTL, not its
// default 8 hours. On the caller's pool the old value is saved for Retire;
// an exclusive pool's connection keeps the last session's value, and its
// first GET_LOCK runs with the DSN's wait_timeout.
func (d *Driver) openSession(c *sconn, key string, got *sql.NullInt64) error {
	if !d.exclusive {
		if err := c.exec(saveTimeout(c.timeout)); err != nil {
			return fmt.Errorf("set wait_timeout: %w", err)
		}
	}
	var id, current int64
	if err := c.query("SELECT GET_LOCK("+literal(key)+", 0), CONNECTION_ID(), @@SESSION.wait_timeout", got, &id, &current); err != nil {
		return err
	}
	c.identify(id)
	if time.Duration(current)*time.Second != c.timeout {
		if err := c.exec("SET SESSION wait_timeout = " + seconds(c.timeout)); err != nil {
			return fmt.Errorf("set wait_timeout: %w", err)
		}
	}
	return nil
}

// letGo releases key on s, in the caller's use, after a failure past
// GET_LOCK; if that fails too, the session ends, freeing the lock.
func letGo(s *session, key string) {
	var rel sql.NullInt64
	if err := s.C.query("SELECT RELEASE_LOCK("+literal(key)+")", &rel); err != nil {
		s.EndLost(fmt.Errorf("mysqllock: releasing an abandoned lock failed: %w", err))
		return
	}
	s.Unreserve(key)
}

// grantOn makes the lock s just took for q a hold of s (see
// sqlsession.Pool.Adopt), giving back the use of s, which the caller has.
func (d *Driver) grantOn(s *session, q lockReq, token uint64) (driver.Grant, error) {
	h := &hold{S: s, Name: q.name, Owner: q.owner, Key: q.key}
	if err := d.pool.Adopt(h, q.key); err != nil {
		return driver.Grant{}, err
	}
	return h.Grant(token), nil
}

// waitOn waits on the server for q's lock, on a connection of its own,
// which becomes a session holding the lock once it has it.
func (d *Driver) waitOn(ctx context.Context, q lockReq) (driver.Grant, error) {
	c, err := d.db.Conn(ctx)
	if err != nil {
		return driver.Grant{}, fmt.Errorf("mysqllock: connection for %q: %w", q.name, err)
	}
	s := d.newSession(c, q.timeout, q.key)
	sc := s.C
	// Statements run under ctx: when it ends, go-sql-driver closes the
	// connection, which holds nothing else.
	sc.ctx = ctx
	var got sql.NullInt64
	if err := d.openSession(sc, q.key, &got); err != nil || !got.Valid {
		abandon(c, q.key, got.Int64 == 1)
		return driver.Grant{}, fmt.Errorf("mysqllock: GET_LOCK %q: %w", q.name, cmp.Or(err, errNullLock))
	}
	if got.Int64 == 0 {
		if err := d.wait(ctx, sc, q); err != nil {
			return driver.Grant{}, err
		}
	}
	tok, err := sc.bump(q.name)
	if err != nil {
		abandon(c, q.key, true)
		return driver.Grant{}, err
	}
	sc.ctx = nil
	return d.grantOn(s, q, tok)
}

// newSession returns a fresh session of wait_timeout timeout on c with
// keys reserved (see sqlsession.Pool.Init), in one allocation.
func (d *Driver) newSession(c *sql.Conn, timeout time.Duration, keys ...string) *session {
	sc := &struct {
		s session
		c sconn
	}{c: sconn{d: d, conn: c, timeout: timeout}}
	return d.pool.Init(&sc.s, &sc.c, timeout, keys...)
}

// abandon gives up an incomplete acquisition on a connection of its own:
// it releases the lock if held, and discards the connection either way
// (it may have been sent a KILL QUERY, or be in an unknown state).
func abandon(c *sql.Conn, key string, held bool) {
	if held {
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		var rel sql.NullInt64
		_ = c.QueryRowContext(ctx, "SELECT RELEASE_LOCK("+literal(key)+")").Scan(&rel)
		cancel()
	}
	discard(c)
}

// wait waits on the server for q's lock, on s, a session of its own not
// yet shared, until it holds it or ctx (or Close) ends the wait.
//
// go-sql-driver answers a cancelled context by closing the connection,
// which the server notices only later (MariaDB 10.11: after about a
// second, the wait queued meanwhile), so the wait runs under a context of
// its own, and ctx's end sends a KILL QUERY from another connection;
// closing the connection is the fallback when the KILL is late or does not
// take. The connection is discarded afterwards either way.
func (d *Driver) wait(ctx context.Context, s *sconn, q lockReq) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(d.ctx, cancel)()

	qctx, qcancel := context.WithCancel(context.Background())
	defer qcancel()
	returned, killed := make(chan struct{}), make(chan struct{})
	stopKill := context.AfterFunc(wctx, func() {
		defer close(killed)
		if d.killQuery(s.id) == nil {
			select {
			case <-returned:
				return
			case <-time.After(killGrace):
			}
		}
		qcancel()
	})
	// finish stops or awaits the killer; true if ctx or Close ended the wait.
	finish := func() bool {
		close(returned)
		if !stopKill() {
			<-killed
			return true
		}
		return wctx.Err() != nil
	}

	stmt := "SELECT GET_LOCK(" + literal(q.key) + ", " + strconv.FormatInt(int64(d.waitStep/time.Second), 10) + ")"
	for {
		if wctx.Err() != nil {
			finish()
			abandon(s.conn, q.key, false)
			return d.cancelled(ctx)
		}
		var got sql.NullInt64
		err := s.conn.QueryRowContext(qctx, stmt).Scan(&got)
		acquired := err == nil && got.Valid && got.Int64 == 1
		if err == nil && got.Valid && got.Int64 == 0 && wctx.Err() == nil {
			continue // a step timed out: wait again
		}
		if finish() {
			abandon(s.conn, q.key, acquired)
			return d.cancelled(ctx)
		}
		switch {
		case err != nil:
			discard(s.conn)
			return fmt.Errorf("mysqllock: wait for %q: %w", q.name, err)
		case !got.Valid:
			discard(s.conn)
			return fmt.Errorf("mysqllock: wait for %q: %w", q.name, errNullLock)
		case !acquired:
			discard(s.conn)
			return fmt.Errorf("mysqllock: wait for %q: GET_LOCK returned %d", q.name, got.Int64)
		}
		return nil
	}
}

// killQuery ends connection id's statement from another, leaving it open.
func (d *Driver) killQuery(id int64) error {
	ctx, cancel := context.WithTimeout(context.Background(), killTimeout)
	defer cancel()
	_, err := d.db.ExecContext(ctx, "KILL QUERY "+strconv.FormatInt(id, 10))
	return err
}

// discard closes c's connection, not returning it to the pool: the server
// frees its lock, if any, when it sees it go.
func discard(c *sql.Conn) {
	// database/sql closes a connection whose Raw callback reports it bad.
	_ = c.Raw(func(any) error { return sqldriver.ErrBadConn })
}

// bump advances the counter of the lock called name on the session,
// which has just taken the lock, and returns the new token; the caller
// has the use of the session. A missing table is created, once, on that
// connection.
func (c *sconn) bump(name string) (uint64, error) {
	ctx, cancel := c.bound()
	defer c.unbound(cancel)
	d := c.d
	q := d.sql.bump + literal(name) + bumpEnd
	sent := time.Now()
	for created := false; ; created = true {
		res, err := c.conn.ExecContext(ctx, q)
		if err == nil {
			id, err := res.LastInsertId()
			if err == nil && id <= 0 {
				err = fmt.Errorf("the server reported token %d", id)
			}
			if err != nil {
				return 0, fmt.Errorf("mysqllock: fencing token of %q: %w", name, err)
			}
			c.lastOK = sent
			return uint64(id), nil
		}
		if me, ok := errors.AsType[*mysql.MySQLError](err); ok && me.Number == erNoSuchTable && !created {
			if _, err := c.conn.ExecContext(ctx, d.sql.create); err != nil {
				return 0, fmt.Errorf("mysqllock: create table %s: %w", d.table, err)
			}
			continue
		}
		return 0, fmt.Errorf("mysqllock: fencing token of %q in %s: %w", name, d.table, err)
	}
}

// erNoSuchTable is ER_NO_SUCH_TABLE, on MySQL and MariaDB alike.
const erNoSuchTable = 1146
