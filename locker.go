package dlock

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/internal/bg"
)

// A Locker takes named locks on one backend. Create one with Open (from a
// URL) or New (from a driver, usually through a backend package's
// constructor), share it across goroutines, and Close it when done.
//
// A Locker is safe for concurrent use. It must not be copied.
type Locker struct {
	drv     driver.Driver
	waiter  driver.Waiter
	elector driver.Elector // nil: no elections
	backend string
	cfg     config
	m       *metrics
	tracer  trace.Tracer // nil: no tracing
	log     *slog.Logger

	// modes is what the driver answered, at New, for each mode of
	// driver.Mode: whether it has the mode and, if not, why.
	modes [driver.Leader + 1]modeSupport

	mu     sync.Mutex
	closed bool
	leases map[*Lease]struct{}

	// bg counts the goroutines started on a lease's behalf (the unlock
	// after a loss or a max hold); Close waits for them.
	bg bg.Group
}

// New returns a Locker over the driver d, which the Locker then owns:
// closing the Locker closes d. Backend packages offer constructors that
// call it; use New directly for a driver of your own. The options set the
// Locker's defaults; an invalid option is an error, and then New closes d,
// so that a constructor can hand its driver over without cleaning up.
func New(d driver.Driver, opts ...Option) (*Locker, error) {
	backend := "custom"
	if s, ok := d.(driver.Schemer); ok {
		backend = s.Scheme()
	}
	return newLocker(d, backend, opts)
}

func newLocker(d driver.Driver, backend string, opts []Option) (*Locker, error) {
	if d == nil {
		return nil, errors.New("dlock: New: nil driver")
	}
	cfg := defaultConfig().with(opts)
	if cfg.err != nil {
		_ = d.Close()
		return nil, cfg.err
	}
	l := &Locker{drv: d, backend: backend, cfg: cfg, leases: map[*Lease]struct{}{}}
	l.waiter, _ = d.(driver.Waiter)
	l.elector, _ = d.(driver.Elector)
	for m := range l.modes {
		l.modes[m] = supportOf(d, driver.Mode(m))
	}
	l.m = newMetrics(cfg.meter, backend, cfg.nameClass)
	if cfg.tracer != nil {
		l.tracer = cfg.tracer.Tracer(tracerName)
	}
	l.log = cmp.Or(cfg.logger, slog.New(slog.DiscardHandler)).With("backend", backend)
	return l, nil
}

// Supports reports whether the Locker's backend implements the kind of
// lock m: always for driver.Exclusive (the mutex), for other modes when
// the driver says so (see driver.Moder). Methods for a mode the backend
// lacks fail with ErrUnsupported.
func (l *Locker) Supports(m driver.Mode) bool { return l.support(m).ok }

// modeSupport is whether a Locker's driver implements a mode and, if not,
// the end of the ErrUnsupported error of a request in that mode: the
// reason of a driver.Unsupporter (as redislock's in its redsync layout)
// in parentheses, or nothing.
type modeSupport struct {
	ok  bool
	why string
}

// supportOf asks driver d about mode m, once, for New: the mutex is always
// there; another mode needs a driver.Moder that has it, and an election a
// driver.Elector too. A driver's modes are fixed when it is made.
func supportOf(d driver.Driver, m driver.Mode) modeSupport {
	moder, _ := d.(driver.Moder)
	_, elector := d.(driver.Elector)
	if m == driver.Exclusive || moder != nil && (m != driver.Leader || elector) && moder.Supports(m) {
		return modeSupport{ok: true}
	}
	if u, ok := d.(driver.Unsupporter); ok {
		if why := u.UnsupportedReason(m); why != "" {
			return modeSupport{why: " (" + why + ")"}
		}
	}
	return modeSupport{}
}

// support is what the driver said of mode m at New; a mode that
// driver.Mode does not define is unsupported.
func (l *Locker) support(m driver.Mode) modeSupport {
	if int(m) < len(l.modes) {
		return l.modes[m]
	}
	return modeSupport{}
}

// check is the entry check of a request for the lock name in mode m, made
// once, before the driver sees it: the name must be valid (else
// ErrInvalidName) and the driver must have the mode (else ErrUnsupported).
func (l *Locker) check(name string, m driver.Mode) error {
	mode := l.support(m)
	if err := ValidateName(name); err != nil {
		return err
	}
	if !mode.ok {
		return fmt.Errorf("dlock: %s lock %q on the %s backend: %w%s", m, name, l.backend, ErrUnsupported, mode.why)
	}
	return nil
}

// Driver returns the Locker's driver, for backend-specific features.
func (l *Locker) Driver() driver.Driver { return l.drv }

// Acquire takes the lock called name, waiting as long as ctx allows. It
// returns a held *Lease, or an error: ctx's error (wrapped, so errors.Is
// works) when ctx ends first, in which case nothing stays held or queued;
// an error wrapping ErrInvalidName for a bad name; ErrClosed after Close;
// or the backend's error. A ctx that is already done never acquires.
//
// Backends that can be notified of a release wait for that; others retry
// with the Locker's Backoff, never past the holder's known expiry.
func (l *Locker) Acquire(ctx context.Context, name string, opts ...Option) (*Lease, error) {
	return l.acquire(ctx, driver.Request{Name: name}, opts, true)
}

// TryAcquire makes one attempt to take the lock called name. When another
// owner holds it, the error matches ErrNotAcquired (and is usually a
// *HeldError telling how long the holder's lock has left).
func (l *Locker) TryAcquire(ctx context.Context, name string, opts ...Option) (*Lease, error) {
	return l.acquire(ctx, driver.Request{Name: name}, opts, false)
}

// acquire takes the lock req asks for (Name, Mode, Limit, Value set; the
// rest filled in here), waiting if wait is set. The request is checked
// once, here, and every try after sends it as it is (with a new owner
// only after a grant that arrived spent).
func (l *Locker) acquire(ctx context.Context, req driver.Request, opts []Option, wait bool) (*Lease, error) {
	name := req.Name
	cfg := l.cfg
	if len(opts) > 0 {
		cfg = cfg.with(opts)
		if cfg.err != nil {
			return nil, cfg.err
		}
	}
	if err := l.check(name, req.Mode); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("dlock: acquire %q: %w", name, err)
	}
	if l.isClosed() {
		return nil, ErrClosed
	}
	req.TTL = cfg.ttl
	ms := l.m.sets(name)
	obs := l.observer(ctx, ms)
	ctx, span := l.startAcquire(ctx, req, wait, ms)
	tries := 0
	if wait {
		l.m.waits(ms, 1)
		defer l.m.waits(ms, -1)
	}
	// A driver.Waiter is asked to wait; another is tried again after a
	// pause while the lock is busy (see pause).
	start := time.Now()
	var g driver.Grant
	var err error
	var end time.Time // when the last try returned
	for attempt := 1; ; attempt++ {
		tries++
		if attempt == 1 {
			req.Owner = newOwner()
		}
		if wait && l.waiter != nil {
			g, err = l.waiter.Lock(ctx, req)
		} else {
			g, err = l.drv.TryLock(ctx, req)
		}
		end = time.Now()
		if err == nil && spent(g, req.TTL, end) {
			// The grant arrived spent (the request outlasted the TTL, as
			// while a store fails over): the lock may be another's by now.
			// Release it, so that it passes on, and when waiting try again
			// as a new acquisition: a new owner, the backoff from its start.
			l.unlockBounded(ctx, req, "dlock: releasing a grant that arrived after its TTL", "token", g.Token)
			if !wait {
				err = fmt.Errorf("dlock: acquire %q: %w: granted %v after the request, when its TTL %v had run out", name, ErrNotAcquired, end.Sub(start).Round(time.Millisecond), req.TTL)
				break
			}
			if err = ctx.Err(); err != nil {
				break
			}
			attempt = 0
			continue
		}
		if err == nil || !wait || l.waiter != nil || !errors.Is(err, ErrNotAcquired) {
			break
		}
		if err = pause(ctx, cfg.backoff, attempt, err); err != nil {
			end = time.Now()
			break
		}
	}
	waited := end.Sub(start)
	if err != nil {
		result := resultError
		switch {
		case errors.Is(err, ErrNotAcquired):
			result = resultNotAcquired
		case ctx.Err() != nil:
			result = resultCanceled
			if !errors.Is(err, ctx.Err()) {
				err = errors.Join(ctx.Err(), err)
			}
		}
		l.m.acquired(ms, result, waited)
		endAcquire(span, result, tries, waited, 0, err)
		if result == resultError {
			l.log.WarnContext(ctx, "dlock: acquire failed", "name", name, "error", err)
		}
		if result == resultNotAcquired {
			return nil, err
		}
		return nil, fmt.Errorf("dlock: acquire %q: %w", name, err)
	}
	l.m.acquired(ms, resultAcquired, waited)
	endAcquire(span, resultAcquired, tries, waited, g.Token, nil)
	lease := newLease(l, req, g, obs, cfg.autoRenew, cfg.maxHold)
	if l.log.Enabled(ctx, slog.LevelDebug) {
		l.log.DebugContext(ctx, "dlock: acquired", "name", name, "token", g.Token, "waited", waited)
	}
	return lease, nil
}

// spent reports whether grant g, for a lock of TTL ttl, has no validity
// left at now, as it arrives: past its Expires less the lease's loss
// margin, or refused by its driver's Check.
func spent(g driver.Grant, ttl time.Duration, now time.Time) bool {
	if !g.Expires.IsZero() && !now.Before(g.Expires.Add(-lossMargin(ttl))) {
		return true
	}
	return g.Check != nil && g.Check(now) != nil
}

// unlockBounded makes a best-effort, owner-checked unlock of req that its
// caller does not wait on: bounded by closeReleaseTimeout, even when ctx
// has ended. A failure is logged at warn, as what with args; a lock
// already gone is none. A failed unlock leaves the lock to its TTL.
func (l *Locker) unlockBounded(ctx context.Context, req driver.Request, what string, args ...any) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeReleaseTimeout)
	defer cancel()
	if err := l.drv.Unlock(ctx, req); err != nil && !errors.Is(err, ErrNotHeld) {
		l.log.WarnContext(ctx, what, append(append([]any{"name", req.Name}, args...), "error", err)...)
	}
}

// Close releases every lease the Locker still holds, waits for the unlocks
// that leases started themselves when they ended (at their WithMaxHold, or
// lost when their validity ran out), then closes the driver: a lock whose
// lease ended at its max hold is free on the store when Close returns,
// unless the store was unreachable within the bound (5 s per release, 5 s
// for those unlocks). Leases end with ErrReleased, or ErrLost if lost.
// Close returns the releases' errors and the driver's, joined; a failed
// best-effort unlock after a lease's end is logged at warn. Later calls
// return nil.
func (l *Locker) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	leases := slices.Collect(maps.Keys(l.leases))
	l.mu.Unlock()
	var errs []error
	for _, s := range leases {
		ctx, cancel := context.WithTimeout(context.Background(), closeReleaseTimeout)
		if err := s.Release(ctx); err != nil && !errors.Is(err, ErrNotHeld) {
			errs = append(errs, err)
		}
		cancel()
	}
	if !l.bg.Wait(closeReleaseTimeout) {
		errs = append(errs, fmt.Errorf("dlock: Close: an unlock after a lease's end did not return within %v", closeReleaseTimeout))
	}
	errs = append(errs, l.drv.Close())
	return errors.Join(errs...)
}

// closeReleaseTimeout bounds each release that Close makes.
const closeReleaseTimeout = 5 * time.Second

func (l *Locker) isClosed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}

func (l *Locker) track(s *Lease, add bool) {
	l.mu.Lock()
	if add {
		l.leases[s] = struct{}{}
	} else {
		delete(l.leases, s)
	}
	l.mu.Unlock()
}

// newOwner returns 128 random bits in hex: the value that proves which
// acquisition holds a lock.
func newOwner() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails since Go 1.24
	return hex.EncodeToString(b[:])
}
