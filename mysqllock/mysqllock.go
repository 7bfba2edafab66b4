package mysqllock

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/internal/bg"
	"github.com/dlockgo/dlock/internal/gate"
)

// Defaults of Options and of mysql:// URLs.
const (
	// DefaultTable is the table of fencing-token counters.
	DefaultTable = "dlock_tokens"
	// DefaultPrefix starts the server-side name of every lock.
	DefaultPrefix = "dlock:"
	// DefaultKeepAlive is how often the driver checks each of its sessions.
	DefaultKeepAlive = time.Second
	// DefaultWaitStep is the longest single GET_LOCK wait, then issued again.
	DefaultWaitStep = 30 * time.Second
	// DefaultSessionLocks is how many locks one session holds at most.
	DefaultSessionLocks = 256
)

// MaxPrefixLen is the longest Options.Prefix: at least 31 characters of
// the server's 64 are left for the name or its hash.
const MaxPrefixLen = 32

func init() {
	dlock.Register("mysql", open)
}

// Options configure a Driver; the zero value, like a nil *Options, means defaults.
type Options struct {
	// Table is the table of fencing-token counters, "table" or
	// "database.table": letters, digits, '_' and '$'. Lockers of the same
	// locks must share it, or their tokens would not increase from one to
	// the other. It is created when first needed, or by Migrate. Default
	// DefaultTable.
	Table string

	// Prefix starts the server-side name of every lock (see LockName).
	// GET_LOCK names are global to the server, across databases: Lockers
	// that must exclude each other use the same prefix, and unrelated
	// Lockers' prefixes must not be prefixes of one another. At most
	// MaxPrefixLen bytes of lower-case ASCII letters, digits and
	// - _ . : @ + = /. Default DefaultPrefix; set NoPrefix for none.
	Prefix string

	// NoPrefix makes the server-side names carry no prefix at all.
	NoPrefix bool

	// KeepAlive is how often the driver checks each of its sessions, and
	// so about how soon a lock the server took away (a kill, a restart) is
	// reported lost. It is lowered to a third of the locks' TTL when that
	// is shorter. Default DefaultKeepAlive.
	KeepAlive time.Duration

	// SessionLocks is the most locks one of the driver's sessions holds:
	// n locks of one TTL use about n/SessionLocks connections (more while
	// acquisitions run side by side, and one per TTL in use), and a lost
	// connection loses every lock on it, so this bounds what one loss
	// takes. 1 gives each lock a connection of its own. Zero means
	// DefaultSessionLocks.
	SessionLocks int

	// ExclusivePool declares that the *sql.DB serves this driver alone, so
	// that a connection goes back to the pool with the wait_timeout the
	// driver set, saving two of the five statements of an acquisition and
	// its release (see docs/MYSQL.md). Give such a pool's connections a
	// wait_timeout (DSN parameter) no longer than the TTLs in use. A driver
	// opened from a URL has such a pool of its own.
	ExclusivePool bool

	// WaitStep bounds each server-side wait of Acquire: a GET_LOCK that
	// waited this long is issued again. Keep it below the DSN's
	// readTimeout, if any. Whole seconds, at least one. Default
	// DefaultWaitStep.
	WaitStep time.Duration

	// Sockets, from WatchSockets on the mysql.Config of the caller's
	// *sql.DB, lets the driver watch its sessions' sockets, so that a kill
	// ends the lease within about a round trip, not at the next keep-alive
	// check. Nil: not watched. A driver opened from a URL watches its own.
	Sockets *Sockets
}

// Driver is the MySQL/MariaDB driver: a dlock driver.Driver and
// driver.Waiter over a *sql.DB of github.com/go-sql-driver/mysql. Create
// it with NewDriver (or New, or dlock.Open with a mysql:// URL).
//
// Held locks share the driver's sessions, connections checked out of the
// *sql.DB while they hold locks (see docs/MYSQL.md). A Driver is safe for
// concurrent use by multiple goroutines. It must not be copied.
type Driver struct {
	db           *sql.DB
	own          bool // opened from a URL: Close closes db
	exclusive    bool // Options.ExclusivePool
	table        string
	prefix       string
	keepAlive    time.Duration
	waitStep     time.Duration
	sessionLocks int
	sql          statements
	socks        *Sockets // nil: no socket is watched

	ctx    context.Context // ends at Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // acquisitions in progress
	// bg counts the sessions' keepers, releases and checks that outlived
	// their callers, ends after a Check; Close waits, at most closeWait.
	bg bg.Group

	mu     sync.Mutex
	closed bool
	pool   *pool // the sessions, and the locks held on them

	gates gate.Set[struct{}] // waiting Lock calls, by name
}

// NewDriver returns a driver that takes its connections from db, a
// *sql.DB of github.com/go-sql-driver/mysql, with the options o (nil means
// the defaults). The caller keeps owning db. Held locks keep db's
// connections (see Options.SessionLocks), and so does each name with
// Acquire calls waiting on the server (one per name; the others wait in
// the process); cancelling a wait takes one more for a moment: size
// db.SetMaxOpenConns and db.SetMaxIdleConns for that. NewDriver panics if
// db is nil; invalid options are an error.
func NewDriver(db *sql.DB, o *Options) (*Driver, error) {
	if db == nil {
		panic("mysqllock: NewDriver with a nil *sql.DB")
	}
	opt := *cmp.Or(o, new(Options))
	if opt.Table == "" {
		opt.Table = DefaultTable
	}
	table, err := quoteTable(opt.Table)
	if err != nil {
		return nil, err
	}
	switch {
	case opt.NoPrefix:
		opt.Prefix = ""
	case opt.Prefix == "":
		opt.Prefix = DefaultPrefix
	}
	if err := checkPrefix(opt.Prefix); err != nil {
		return nil, err
	}
	if opt.KeepAlive == 0 {
		opt.KeepAlive = DefaultKeepAlive
	}
	if opt.KeepAlive < 0 {
		return nil, fmt.Errorf("mysqllock: negative keep-alive period %v", opt.KeepAlive)
	}
	if opt.WaitStep == 0 {
		opt.WaitStep = DefaultWaitStep
	}
	if opt.WaitStep < time.Second {
		return nil, fmt.Errorf("mysqllock: wait step %v is below one second", opt.WaitStep)
	}
	if opt.SessionLocks == 0 {
		opt.SessionLocks = DefaultSessionLocks
	}
	if opt.SessionLocks < 0 {
		return nil, fmt.Errorf("mysqllock: negative session_locks %d", opt.SessionLocks)
	}
	d := &Driver{
		db:           db,
		table:        opt.Table,
		prefix:       opt.Prefix,
		keepAlive:    opt.KeepAlive,
		exclusive:    opt.ExclusivePool,
		waitStep:     opt.WaitStep.Truncate(time.Second),
		sessionLocks: opt.SessionLocks,
		sql:          newStatements(table),
		socks:        opt.Sockets,
	}
	d.pool = d.newPool()
	d.ctx, d.cancel = context.WithCancel(context.Background())
	return d, nil
}

// New returns a dlock.Locker over NewDriver(db, o), with the Locker
// options opts. Closing the Locker closes the driver but not db.
func New(db *sql.DB, o *Options, opts ...dlock.Option) (*dlock.Locker, error) {
	d, err := NewDriver(db, o)
	if err != nil {
		return nil, err
	}
	return dlock.New(d, opts...)
}

// Scheme returns "mysql", the backend's name in metrics and logs.
func (d *Driver) Scheme() string { return "mysql" }

// DB returns the *sql.DB the driver takes its connections from.
func (d *Driver) DB() *sql.DB { return d.db }

// Table returns the table of fencing-token counters, as configured.
func (d *Driver) Table() string { return d.table }

// Prefix returns the prefix of the server-side lock names.
func (d *Driver) Prefix() string { return d.prefix }

// LockName returns the name under which the server knows the lock called
// name: what GET_LOCK, IS_USED_LOCK and SHOW PROCESSLIST show. See
// docs/MYSQL.md, "Names", for the mapping.
func (d *Driver) LockName(name string) string { return lockName(d.prefix, name) }

// Close ends the driver: waiting Lock calls return ErrClosed, the
// sessions of locks still held are closed (the server frees the locks,
// whose loss is signalled), and the *sql.DB is closed if the driver opened
// it from a URL. Before that it waits, at most 5 s, for the driver's own
// goroutines (a release or a check that went on after its context ended),
// so that none runs once it returns, else it returns an error. Close is
// idempotent.
func (d *Driver) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	d.mu.Unlock()
	d.cancel()
	d.pool.LoseAll(driver.ErrClosed)
	d.wg.Wait()
	var err error
	if !d.bg.Wait(closeWait) {
		err = fmt.Errorf("mysqllock: close: the driver's background work (a release, the close of a connection) did not end within %v", closeWait)
	}
	if d.own {
		err = errors.Join(err, d.db.Close())
	}
	return err
}

// closeWait bounds Close's wait for background work, which closed sessions
// end at once or within a statement's bound.
const closeWait = 5 * time.Second

// begin registers an acquisition in progress; it fails after Close.
func (d *Driver) begin() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return driver.ErrClosed
	}
	d.wg.Add(1)
	return nil
}

// isClosed reports whether Close has been called.
func (d *Driver) isClosed() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.closed
}

// cancelled is the error of a wait that ctx or Close ended.
func (d *Driver) cancelled(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return driver.ErrClosed
}

var errNullLock = errors.New("GET_LOCK returned NULL (the statement was killed, or the server failed)")

var (
	_ driver.Inspector = (*Driver)(nil)
	_ driver.Schemer   = (*Driver)(nil)
)
