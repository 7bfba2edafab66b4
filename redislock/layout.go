package redislock

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/dlockgo/dlock/driver"
)

// Layout is how a Driver lays a lock out in Redis (see Layouts in
// docs/REDIS.md). The zero Layout is LayoutDlock.
type Layout string

const (
	// LayoutDlock is dlock's own layout: every kind of lock, keys tagged
	// {name}, a wait queue with handoff. The default.
	LayoutDlock Layout = "dlock"

	// LayoutRedsync is the plain string key of redsync and bsm/redislock,
	// <prefix><name> holding the owner value with a PX TTL, shared with
	// those libraries' clients, beside which dlock keeps a fencing counter.
	// It has the mutex only, and no wait queue (see PollInterval).
	LayoutRedsync Layout = "redsync"
)

// DefaultPollInterval is the default of Options.PollInterval: ten small
// scripts a second per waiting call (see docs/REDIS.md, Layouts).
const DefaultPollInterval = 100 * time.Millisecond

// A format is a layout: the kinds of lock it has, by mode, and how.
type format struct {
	prefix string                // the default of Options.Prefix
	kinds  map[driver.Mode]*kind // a mode missing here is not supported
	listed []*kind               // the kinds Inspect lists
	reason string                // why the modes missing from kinds are
}

var (
	dlockFormat   = &format{prefix: DefaultPrefix, kinds: dlockKinds, listed: dlockListed}
	redsyncFormat = &format{kinds: plainKinds, listed: []*kind{plainMutex},
		reason: "layout=redsync has the mutex only: redsync and bsm/redislock have no readers-writer, semaphore or election format"}
)

// formatOf returns the format of layout l ("" is LayoutDlock).
func formatOf(l Layout) (*format, error) {
	switch l {
	case "", LayoutDlock:
		return dlockFormat, nil
	case LayoutRedsync:
		return redsyncFormat, nil
	}
	return nil, fmt.Errorf("Layout %q, want LayoutDlock or LayoutRedsync", l)
}

// kind returns the kind of lock of mode m, or the error of a request for
// it on name when the layout lacks it.
func (f *format) kind(m driver.Mode, name string) (*kind, error) {
	if k := f.kinds[m]; k != nil {
		return k, nil
	}
	return nil, f.unsupported(fmt.Sprint(m, " lock"), name)
}

// unsupported is the error of a request for what, on name, which the
// layout lacks.
func (f *format) unsupported(what, name string) error {
	if f.reason == "" {
		return fmt.Errorf("redislock: %s %q: %w", what, name, driver.ErrUnsupported)
	}
	return fmt.Errorf("redislock: %s %q: %w (%s)", what, name, driver.ErrUnsupported, f.reason)
}

// Supports reports whether the driver implements mode m: every mode of
// driver.Mode (the mutex, readers-writer locks, semaphores and elections)
// in LayoutDlock, the mutex only in LayoutRedsync (see UnsupportedReason).
func (d *Driver) Supports(m driver.Mode) bool {
	return d.format.kinds[m] != nil
}

// UnsupportedReason says why the driver lacks mode m: "" for the modes it
// has (every one in LayoutDlock), the layout's reason for the others in
// LayoutRedsync. dlock adds it to the error of a request for such a mode.
func (d *Driver) UnsupportedReason(m driver.Mode) string {
	if d.format.kinds[m] != nil {
		return ""
	}
	return d.format.reason
}

// pollDelay is the wait before a waiter in LayoutRedsync tries again when
// nothing else wakes it: PollInterval on average, spread over half to one
// and a half times it, so that waiters do not try in step.
func (d *Driver) pollDelay() time.Duration {
	return d.pollInterval/2 + rand.N(d.pollInterval)
}
