package pglock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/internal/bg"
)

// Defaults of Options.
const (
	// DefaultTable is the token table's name.
	DefaultTable = "dlock_tokens"
	// DefaultKeepalive is the longest interval between two checks that a
	// held lock's connection is alive.
	DefaultKeepalive = 5 * time.Second
	// DefaultMaxIdle is how many idle connections a driver keeps.
	DefaultMaxIdle = 4
	// DefaultSessionLocks is the most locks one session (connection) holds:
	// 2,000 locks take 8 connections, and a lost one takes at most 256.
	DefaultSessionLocks = 256
	// DefaultConnectTimeout bounds each connection attempt (TCP, TLS,
	// start-up) without connect_timeout: a server that never answers fails it.
	DefaultConnectTimeout = 10 * time.Second
)

// connectTimeout is DefaultConnectTimeout; tests shorten it.
var connectTimeout = DefaultConnectTimeout

// MinKeepalive is the shortest keep-alive interval the driver accepts.
const MinKeepalive = 10 * time.Millisecond

var errClosed = driver.ErrClosed

// Options configure a Driver; the zero value, like a nil *Options, means defaults.
type Options struct {
	// Table is the token table, a row per lock name with the last fencing
	// token handed out, whose sequence Table+"_seq" draws the tokens: an
	// unquoted lower-case identifier, optionally schema-qualified
	// ("locks.dlock_tokens"). It is part of every lock's advisory key (see
	// Key): drivers on different tables never share a lock. Default
	// DefaultTable.
	Table string

	// Keepalive is the longest interval between two checks that a held
	// lock's connection is alive (an empty query, timing out after the
	// interval but at least a second): every Keepalive or third of the
	// lock's TTL, the shorter, so a holder learns of a silent connection
	// within about two intervals; one the server closes is seen on its
	// socket at once (see "Loss" in docs/POSTGRES.md). It also sets the
	// sessions' server side (see NoServerKeepalive). Default
	// DefaultKeepalive; at least MinKeepalive.
	Keepalive time.Duration

	// MaxIdle is how many idle connections the driver keeps open for the
	// next acquisitions; a connection beyond it is closed when its lock is
	// released. Zero means DefaultMaxIdle; a negative value keeps none.
	MaxIdle int

	// SessionLocks is the most locks one of the driver's sessions holds:
	// n locks use about n/SessionLocks connections (more while
	// acquisitions run side by side), and a lost connection loses every
	// lock on it, so this bounds what one loss takes. 1 gives each lock a
	// connection of its own. Zero means DefaultSessionLocks.
	SessionLocks int

	// NoMigrate stops NewDriver from creating the token table (see
	// Migrate): set it when the role that takes locks may not create
	// tables, and create the table beforehand.
	NoMigrate bool

	// NoServerKeepalive leaves the server-side timeouts of the driver's
	// sessions as the server has them. By default a new session sets the
	// server's TCP keepalive, tcp_user_timeout and
	// client_connection_check_interval from Keepalive (unless the
	// connection string gives them), so that the server frees a vanished
	// client's locks within about four intervals (values: docs/POSTGRES.md).
	NoServerKeepalive bool
}

// Driver is the PostgreSQL driver: a dlock driver.Driver, driver.Waiter,
// driver.Moder (every mode) and driver.Elector over session-level
// advisory locks. Create it with NewDriver (or New, or dlock.Open with a
// postgres:// URL).
//
// Held locks share the driver's sessions (see Options.SessionLocks); each
// Lock waiting on the server has a connection of its own, one per key at
// most. The driver's connections are never shared with other code; one
// that holds nothing more goes back to a small idle set. A Driver is safe
// for concurrent use by multiple goroutines. It must not be copied.
type Driver struct {
	cfg               *pgx.ConnConfig
	st                statements
	keepalive         time.Duration
	maxIdle           int
	sessionLocks      int
	noServerKeepalive bool

	life      context.Context // ended by Close: bounds the listener's and observers' work
	endLife   context.CancelFunc
	lis       listener
	observers sync.WaitGroup // Observe's goroutines, for Close to wait for
	// bg counts the sessions' keepers, releases and ends that outlived
	// their callers, cancel requests; Close waits, at most closeWait.
	bg bg.Group

	mu       sync.Mutex
	closed   bool
	idle     []*conn
	pool     *pool // the sessions, and the locks held on them
	keys     map[int64]*keyState
	spareKey *keyState // unused, so that most acquisitions make none
	waiting  map[*conn]context.CancelFunc
}

// NewDriver returns a driver whose connections are made from config,
// which must come from pgx.ParseConfig (the driver sets its context watcher
// handler on a copy). A zero ConnectTimeout (no connect_timeout or
// PGCONNECT_TIMEOUT) gets DefaultConnectTimeout. It connects once, to check
// the server and create the token table unless o.NoMigrate is set; that
// connection becomes the first idle one. Close the driver to close its
// connections.
func NewDriver(ctx context.Context, config *pgx.ConnConfig, o *Options) (*Driver, error) {
	if config == nil {
		return nil, errors.New("pglock: nil connection config")
	}
	opt := *cmp.Or(o, new(Options))
	if opt.Table == "" {
		opt.Table = DefaultTable
	}
	if err := checkTable(opt.Table); err != nil {
		return nil, err
	}
	if opt.Keepalive == 0 {
		opt.Keepalive = DefaultKeepalive
	}
	if opt.Keepalive < MinKeepalive {
		return nil, fmt.Errorf("pglock: keep-alive interval %v is below the minimum %v", opt.Keepalive, MinKeepalive)
	}
	switch {
	case opt.MaxIdle == 0:
		opt.MaxIdle = DefaultMaxIdle
	case opt.MaxIdle < 0:
		opt.MaxIdle = 0
	}
	switch {
	case opt.SessionLocks == 0:
		opt.SessionLocks = DefaultSessionLocks
	case opt.SessionLocks < 0:
		return nil, fmt.Errorf("pglock: SessionLocks %d is negative", opt.SessionLocks)
	}
	cfg := config.Copy()
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = connectTimeout
	}
	d := &Driver{
		cfg:               cfg,
		st:                newStatements(opt.Table),
		keepalive:         opt.Keepalive,
		maxIdle:           opt.MaxIdle,
		sessionLocks:      opt.SessionLocks,
		noServerKeepalive: opt.NoServerKeepalive,
		keys:              map[int64]*keyState{},
		waiting:           map[*conn]context.CancelFunc{},
	}
	d.pool = d.newPool()
	d.life, d.endLife = context.WithCancel(context.Background())
	c, err := d.dial(ctx)
	if err != nil {
		d.endLife()
		return nil, err
	}
	if !opt.NoMigrate {
		c.begin(false)
		if err := Migrate(ctx, c.pg, opt.Table); err != nil {
			c.close()
			d.endLife()
			return nil, err
		}
	}
	d.put(c)
	return d, nil
}

// New returns a dlock.Locker over NewDriver(ctx, config, o), with the
// Locker options opts. Closing the Locker closes the driver.
func New(ctx context.Context, config *pgx.ConnConfig, o *Options, opts ...dlock.Option) (*dlock.Locker, error) {
	d, err := NewDriver(ctx, config, o)
	if err != nil {
		return nil, err
	}
	return dlock.New(d, opts...)
}

// Scheme returns "postgres", the backend's name in metrics and logs (for
// postgresql:// URLs too).
func (d *Driver) Scheme() string { return "postgres" }

// Table returns the token table's name.
func (d *Driver) Table() string { return d.st.table }

// Migrate runs the package function Migrate on one of the driver's
// connections, as NewDriver does unless Options.NoMigrate is set.
func (d *Driver) Migrate(ctx context.Context) error {
	c, _, err := d.get(ctx)
	if err != nil {
		return err
	}
	c.begin(false)
	if err := Migrate(ctx, c.pg, d.st.table); err != nil {
		c.close()
		return err
	}
	d.put(c)
	return nil
}

// Close closes the driver's connections: locks still held end, lost (the
// server frees them), waiting acquisitions fail with ErrClosed, and
// Observe's channels are closed. It then waits, at most 5 s, for the
// driver's own goroutines (an Unlock that went on after its context ended,
// the sessions' keepers), so that none runs once it returns, else it
// returns an error. Close is idempotent.
func (d *Driver) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	idle := d.idle
	d.idle = nil
	for _, cancel := range d.waiting {
		cancel()
	}
	d.endLife()
	d.mu.Unlock()
	d.lis.mu.Lock()
	listening := d.lis.running
	d.lis.mu.Unlock()
	for _, c := range idle {
		c.close()
	}
	d.pool.LoseAll(errClosed)
	if listening {
		<-d.lis.done
	}
	d.observers.Wait()
	if !d.bg.Wait(closeWait) {
		return fmt.Errorf("pglock: close: the driver's background work (a release, the close of a connection) did not end within %v", closeWait)
	}
	return nil
}

// closeWait bounds Close's wait for background work, which closed sessions
// end at once or within a statement's bound.
const closeWait = 5 * time.Second

func (d *Driver) isClosed() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.closed
}

var (
	_ driver.Inspector = (*Driver)(nil)
	_ driver.Schemer   = (*Driver)(nil)
)
