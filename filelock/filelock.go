package filelock

import (
	"cmp"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
)

// Scheme is the URL scheme filelock registers with dlock.
const Scheme = "file"

// DefaultMode is the lock files' mode when Options.Mode is zero: owner only.
const DefaultMode fs.FileMode = 0o600

// errUnsupported is NewDriver's error on a platform without flock.
var errUnsupported = fmt.Errorf("%w: filelock needs flock(2), which %s lacks", driver.ErrUnsupported, runtime.GOOS)

// Options configure a Driver; a nil *Options or the zero value means defaults.
type Options struct {
	// Mode is the permission of the lock files the driver creates, applied
	// exactly (the umask does not narrow it): 0660 lets a group share a
	// lock directory. It must grant the owner read and write. Zero means
	// DefaultMode. Existing files keep their mode.
	Mode fs.FileMode

	// Sync makes every acquisition fsync the lock file after it writes the
	// new fencing token, which otherwise survives a process crash but may
	// be lost with the machine; tokens still increase then, unless the
	// clock was also set back (see the package documentation).
	Sync bool
}

// A Driver takes locks as flocks on files in one directory, one file per
// lock name. It implements driver.Driver, driver.Waiter and driver.Moder
// (the mutex and the readers-writer lock). Create one with NewDriver; it
// is safe for concurrent use, and must not be copied. Locks exclude each
// other across processes and within one: two Drivers, or two acquisitions
// through one Driver, never hold the same name at once.
type Driver struct {
	dir  string // absolute, symbolic links resolved
	mode uint32
	sync bool

	mu       sync.Mutex
	held     map[string]*held // by owner
	closed   bool
	done     chan struct{} // closed by Close
	watching bool          // holds a reference on the process's watcher
}

// held is a held lock; whoever removes it from Driver.held owns its fd.
type held struct {
	name string
	mode driver.Mode
	path string
	fd   int
	id   fileID
}

// NewDriver returns a driver over directory dir (default DefaultDir()),
// which it creates (mode 0700) if missing.
func NewDriver(dir string, o *Options) (*Driver, error) {
	if !supported {
		return nil, errUnsupported
	}
	opts := *cmp.Or(o, new(Options))
	if opts.Mode == 0 {
		opts.Mode = DefaultMode
	}
	if opts.Mode&^fs.ModePerm != 0 || opts.Mode&0o600 != 0o600 {
		return nil, fmt.Errorf("filelock: mode %#o: want permission bits that include owner read and write (0600)", uint32(opts.Mode))
	}
	if dir == "" {
		var err error
		if dir, err = DefaultDir(); err != nil {
			return nil, err
		}
	} else if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("filelock: %w", err)
	}
	// One path however spelt, so that a process's waiters find each other.
	abs, err := filepath.Abs(dir)
	if err == nil {
		abs, err = filepath.EvalSymlinks(abs)
	}
	if err != nil {
		return nil, fmt.Errorf("filelock: %w", err)
	}
	if fi, err := os.Stat(abs); err != nil {
		return nil, fmt.Errorf("filelock: %w", err)
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("filelock: %s is not a directory", abs)
	}
	return &Driver{
		dir:  abs,
		mode: uint32(opts.Mode),
		sync: opts.Sync,
		held: map[string]*held{},
		done: make(chan struct{}),
	}, nil
}

// New returns a Locker with the Locker options opts over NewDriver(dir, o).
func New(dir string, o *Options, opts ...dlock.Option) (*dlock.Locker, error) {
	d, err := NewDriver(dir, o)
	if err != nil {
		return nil, err
	}
	return dlock.New(d, opts...)
}

// Scheme returns "file".
func (d *Driver) Scheme() string { return Scheme }

// Dir returns the driver's lock directory, absolute, links resolved.
func (d *Driver) Dir() string { return d.dir }

// Path returns the path of the file that holds the lock called name (see
// FileName). The error wraps dlock.ErrInvalidName for an invalid name.
func (d *Driver) Path(name string) (string, error) {
	if err := validate(name); err != nil {
		return "", err
	}
	return d.path(name, Suffix), nil
}

// path returns the file of a valid name with suffix, in one allocation.
func (d *Driver) path(name, suffix string) string {
	var b strings.Builder
	b.Grow(len(d.dir) + 1 + len(name) + len(suffix))
	b.WriteString(d.dir)
	b.WriteByte(filepath.Separator)
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c == '/' {
			c = slashEscape
		}
		b.WriteByte(c)
	}
	b.WriteString(suffix)
	return b.String()
}

// Close implements driver.Driver: it releases the driver's locks and ends
// its waits (with driver.ErrClosed); the files stay. Close is idempotent.
func (d *Driver) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	close(d.done)
	hs := d.held
	d.held = nil
	watching := d.watching
	d.watching = false
	d.mu.Unlock()
	for _, h := range hs {
		unlockClose(h.fd)
		notify(h.path)
	}
	if watching {
		unwatchProcess()
	}
	return nil
}

func (d *Driver) isClosed() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.closed
}

var (
	_ driver.Schemer   = (*Driver)(nil)
	_ driver.Inspector = (*Driver)(nil)
)
