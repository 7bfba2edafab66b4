package mysqllock

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/internal/sockwatch"
)

// How a cancelled wait is ended: KILL QUERY is given killTimeout to be
// sent, then the wait statement killGrace to return, before the waiting
// connection is closed instead.
const (
	killTimeout = time.Second
	killGrace   = time.Second
)

// cleanupTimeout bounds the RELEASE_LOCK of an acquisition that is being
// abandoned.
const cleanupTimeout = time.Second

// TryLock implements driver.Driver: GET_LOCK with a timeout of 0 on a
// connection of its own. When another connection holds the lock, it
// returns a *driver.HeldError and the connection goes back to the pool.
func (d *Driver) TryLock(ctx context.Context, r driver.Request) (driver.Grant, error) {
	return d.acquire(ctx, r, false)
}

// Lock implements driver.Waiter: the server queues the wait (GET_LOCK with
// a timeout), and ctx ends it with a KILL QUERY of the waiting statement
// from another connection, so that nothing stays queued when Lock
// returns. Of the driver's Lock calls for one name, one at a time waits on
// the server; the others queue in the process, in order of arrival, with
// no connection, and a ctx that ends takes its call out of the queue at
// once.
func (d *Driver) Lock(ctx context.Context, r driver.Request) (driver.Grant, error) {
	return d.acquire(ctx, r, true)
}

func (d *Driver) acquire(ctx context.Context, r driver.Request, wait bool) (driver.Grant, error) {
	// Names are sent as SQL literals: they must be valid (see literal).
	if err := dlock.ValidateName(r.Name); err != nil {
		return driver.Grant{}, err
	}
	if err := d.begin(); err != nil {
		return driver.Grant{}, err
	}
	defer d.wg.Done()
	if wait {
		// Of the driver's waiters for a name, one at a time waits on the
		// server, with a connection; the others queue here, with none, so
		// that a thousand of them do not pass the server's max_connections.
		g, err := d.gates.Enter(ctx, r.Name, d.ctx.Done())
		if err != nil {
			return driver.Grant{}, d.cancelled(ctx)
		}
		defer g.Leave(struct{}{})
	}
	c, err := d.db.Conn(ctx)
	if err != nil {
		return driver.Grant{}, fmt.Errorf("mysqllock: connection for %q: %w", r.Name, err)
	}
	l := newLock(d, r, c)
	if err := d.take(ctx, l, wait); err != nil {
		return driver.Grant{}, err
	}
	l.w = sockwatch.New(d.socks.socket(l.id), d.socks != nil && d.socks.opaque, sessionEnded)
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		l.abandon(true)
		return driver.Grant{}, driver.ErrClosed
	}
	d.held[r.Owner] = l
	d.mu.Unlock()
	l.w.Start()
	go l.keepAlive()
	if l.w.Watched() && !d.noWatch.Load() {
		go l.watch()
	}
	return driver.Grant{Token: l.token, Lost: l.lost, Check: l.Check}, nil
}

// take gets the lock on l's connection and advances its counter. On
// error, the connection is back in the pool or discarded, and nothing is
// held.
func (d *Driver) take(ctx context.Context, l *lock, wait bool) error {
	// The session's wait_timeout goes down to the lock's TTL (in whole
	// seconds) before the lock can be granted, so that the server frees
	// the lock of a holder that went silent (a host that died without
	// closing its connections, a partition) after the TTL, not after its
	// default of 8 hours. On the caller's pool the old value is saved, to
	// be restored after the release; on an exclusive pool the connection
	// keeps the value the last lock set, and its first GET_LOCK runs with
	// the DSN's wait_timeout.
	if !d.exclusive {
		if _, err := l.conn.ExecContext(ctx, l.saveTimeout()); err != nil {
			discard(l.conn)
			return fmt.Errorf("mysqllock: set wait_timeout for %q: %w", l.name, err)
		}
	}
	var got sql.NullInt64
	var session int64
	err := l.conn.QueryRowContext(ctx, "SELECT GET_LOCK("+literal(l.key)+", 0), CONNECTION_ID(), @@SESSION.wait_timeout").
		Scan(&got, &l.id, &session)
	switch {
	case err != nil:
		discard(l.conn)
		return fmt.Errorf("mysqllock: GET_LOCK %q: %w", l.name, err)
	case !got.Valid:
		discard(l.conn)
		return fmt.Errorf("mysqllock: GET_LOCK %q: %w", l.name, errNullLock)
	case got.Int64 == 0 && !wait:
		l.giveBack(ctx)
		return &driver.HeldError{Name: l.name}
	}
	if time.Duration(session)*time.Second != l.timeout {
		if _, err := l.conn.ExecContext(ctx, "SET SESSION wait_timeout = "+l.seconds()); err != nil {
			l.abandon(got.Int64 == 1)
			return fmt.Errorf("mysqllock: set wait_timeout for %q: %w", l.name, err)
		}
	}
	if got.Int64 == 0 {
		if err := d.wait(ctx, l); err != nil {
			return err
		}
	}
	l.since = time.Now()
	tok, err := d.bump(ctx, l.conn, l.name)
	if err != nil {
		l.abandon(true)
		return err
	}
	l.token = tok
	return nil
}

// wait waits on the server for the lock, on l's connection, until it
// holds it or ctx (or Close) ends the wait.
//
// go-sql-driver answers a cancelled context by closing the connection; the
// server notices that only later (MariaDB 10.11 after about a second, while
// the wait stays queued), so the wait statement runs under a context of
// its own. When ctx ends, a KILL QUERY from another connection ends the
// wait at once; closing the connection is the fallback when the KILL
// cannot be sent in time or does not take. The connection is discarded
// afterwards either way.
func (d *Driver) wait(ctx context.Context, l *lock) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(d.ctx, cancel)()

	qctx, qcancel := context.WithCancel(context.Background())
	defer qcancel()
	returned, killed := make(chan struct{}), make(chan struct{})
	stopKill := context.AfterFunc(wctx, func() {
		defer close(killed)
		if d.killQuery(l.id) == nil {
			t := time.NewTimer(killGrace)
			defer t.Stop()
			select {
			case <-returned:
				return
			case <-t.C:
			}
		}
		qcancel()
	})
	// finish stops the killer, or waits for it; it reports whether the
	// wait was ended by ctx or Close.
	var once sync.Once
	var ended bool
	finish := func() bool {
		once.Do(func() {
			close(returned)
			if !stopKill() {
				<-killed
				ended = true
			}
			ended = ended || wctx.Err() != nil
		})
		return ended
	}

	q := "SELECT GET_LOCK(" + literal(l.key) + ", " + strconv.FormatInt(int64(d.waitStep/time.Second), 10) + ")"
	for {
		if wctx.Err() != nil {
			finish()
			l.abandon(false)
			return d.cancelled(ctx)
		}
		var got sql.NullInt64
		err := l.conn.QueryRowContext(qctx, q).Scan(&got)
		acquired := err == nil && got.Valid && got.Int64 == 1
		if err == nil && got.Valid && got.Int64 == 0 && wctx.Err() == nil {
			continue // a step timed out: wait again
		}
		if finish() {
			l.abandon(acquired)
			return d.cancelled(ctx)
		}
		switch {
		case err != nil:
			discard(l.conn)
			return fmt.Errorf("mysqllock: wait for %q: %w", l.name, err)
		case !got.Valid:
			discard(l.conn)
			return fmt.Errorf("mysqllock: wait for %q: %w", l.name, errNullLock)
		case !acquired:
			discard(l.conn)
			return fmt.Errorf("mysqllock: wait for %q: GET_LOCK returned %d", l.name, got.Int64)
		}
		return nil
	}
}

// killQuery ends the statement that connection id runs, from another
// connection of the pool. KILL QUERY leaves the connection open.
func (d *Driver) killQuery(id int64) error {
	ctx, cancel := context.WithTimeout(context.Background(), killTimeout)
	defer cancel()
	_, err := d.db.ExecContext(ctx, "KILL QUERY "+strconv.FormatInt(id, 10))
	return err
}

// discard closes c's connection instead of returning it to the pool: the
// server frees the connection's lock, if it has one, when it sees it go.
func discard(c *sql.Conn) {
	// database/sql closes a connection whose Raw callback reports it bad.
	_ = c.Raw(func(any) error { return sqldriver.ErrBadConn })
}
