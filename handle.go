package dlock

import (
	"context"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/dlockgo/dlock/driver"
)

// A Handle identifies one acquisition on its store: the backend's scheme,
// the lock's name and kind, the acquisition's owner value and fencing
// token, its TTL and, with WithMaxHold, the time it must be let go. It
// carries no address and no credentials: whoever resumes it needs a
// Locker on the same store. String encodes it as one short line of text
// (for an environment variable or a file), ParseHandle decodes it.
//
// The owner value is what lets the holder renew and release the lock;
// treat a handle as you would the lock itself.
type Handle struct {
	// Scheme is the backend's (Driver.Scheme), checked by Resume.
	Scheme string
	// Name and Mode are the lock's; Limit a semaphore's permits.
	Name  string
	Mode  driver.Mode
	Limit int
	// Owner is the acquisition's owner value, Token its fencing token.
	Owner string
	Token uint64
	// TTL is the lock's time to live, renewed by the resumed lease.
	TTL time.Duration
	// Deadline, when not zero, is when the hold must end (WithMaxHold of
	// the acquisition): a resumed lease ends there.
	Deadline time.Time
}

// handlePrefix starts every encoded Handle, with the format's version.
const handlePrefix = "dlock1"

// String encodes h in nine fields separated by dots: the version, the
// scheme, the mode, the TTL and the deadline in milliseconds (0: none),
// the token, the limit, the owner and the name (base64url).
func (h Handle) String() string {
	var deadline int64
	if !h.Deadline.IsZero() {
		deadline = h.Deadline.UnixMilli()
	}
	return strings.Join([]string{handlePrefix, h.Scheme, h.Mode.String(), strconv.FormatInt(h.TTL.Milliseconds(), 10),
		strconv.FormatInt(deadline, 10), strconv.FormatUint(h.Token, 10), strconv.Itoa(h.Limit), h.Owner,
		base64.RawURLEncoding.EncodeToString([]byte(h.Name))}, ".")
}

// ParseHandle decodes a Handle encoded by Handle.String, or as the dlock
// CLI prints it, with a tenth field, the socket of its detached holder:
// that field must be empty here, since a lock kept by a holder process is
// reached only through the CLI's renew and release.
// Text that is not a handle (garbled, truncated, of another version) is
// an error matching ErrBadHandle that says what is wrong.
func ParseHandle(s string) (Handle, error) {
	bad := func(what string) (Handle, error) {
		return Handle{}, fmt.Errorf("%w: %s", ErrBadHandle, what)
	}
	f := strings.Split(strings.TrimSpace(s), ".")
	if len(f) == 0 || f[0] != handlePrefix {
		return bad("it does not start with " + handlePrefix + ".")
	}
	if len(f) == 10 {
		if f[9] != "" {
			return bad("it names a holder process of the dlock CLI, which only dlock renew and dlock release reach")
		}
		f = f[:9]
	}
	if len(f) != 9 {
		return bad(fmt.Sprintf("%d fields, want 9", len(f)))
	}
	h := Handle{Scheme: f[1], Owner: f[7]}
	if h.Scheme == "" {
		return bad("no scheme")
	}
	mode, ok := parseMode(f[2])
	if !ok {
		return bad(fmt.Sprintf("unknown lock kind %q", f[2]))
	}
	h.Mode = mode
	ttl, err := strconv.ParseInt(f[3], 10, 64)
	if err != nil || time.Duration(ttl)*time.Millisecond < MinTTL {
		return bad(fmt.Sprintf("bad TTL %q", f[3]))
	}
	h.TTL = time.Duration(ttl) * time.Millisecond
	deadline, err := strconv.ParseInt(f[4], 10, 64)
	if err != nil || deadline < 0 {
		return bad(fmt.Sprintf("bad deadline %q", f[4]))
	}
	if deadline > 0 {
		h.Deadline = time.UnixMilli(deadline)
	}
	if h.Token, err = strconv.ParseUint(f[5], 10, 64); err != nil {
		return bad(fmt.Sprintf("bad token %q", f[5]))
	}
	if h.Limit, err = strconv.Atoi(f[6]); err != nil || h.Limit < 0 || (h.Mode == driver.Permit) != (h.Limit > 0) {
		return bad(fmt.Sprintf("bad limit %q", f[6]))
	}
	if h.Owner == "" {
		return bad("no owner")
	}
	name, err := base64.RawURLEncoding.DecodeString(f[8])
	if err != nil {
		return bad("the name is not base64url")
	}
	h.Name = string(name)
	if err := ValidateName(h.Name); err != nil {
		return bad(err.Error())
	}
	return h, nil
}

func parseMode(s string) (driver.Mode, bool) {
	for _, m := range []driver.Mode{driver.Exclusive, driver.Read, driver.Write, driver.Permit, driver.Leader} {
		if m.String() == s {
			return m, true
		}
	}
	return 0, false
}

// handle returns the handle of the lease's acquisition. Only Detach hands
// it out, so that one lease is never renewed from two processes.
func (s *Lease) handle() Handle {
	h := Handle{Scheme: s.l.backend, Name: s.req.Name, Mode: s.req.Mode, Limit: s.req.Limit, Owner: s.req.Owner,
		Token: s.token, TTL: s.req.TTL}
	if s.maxHold > 0 {
		h.Deadline = s.base.Add(s.maxHold)
	}
	return h
}

// Detach hands the lease on: it stops renewing it here, leaves the lock on
// the store as it is (to expire with its TTL unless someone resumes it),
// and returns its handle. The lease then ends with ErrDetached, and its
// Release no longer touches the store. Detach needs a backend whose locks
// outlive the process that took them (see Locker.Resume); on another it
// returns an error matching ErrUnsupported and the lease goes on.
func (s *Lease) Detach() (Handle, error) {
	if _, ok := s.l.drv.(driver.Resumer); !ok {
		return Handle{}, s.l.notResumable()
	}
	if !s.stopSupervision() {
		return Handle{}, s.heldErr()
	}
	defer s.opMu.Unlock()
	h := s.handle()
	if !s.end(ErrDetached, "") {
		return Handle{}, s.heldErr()
	}
	return h, nil
}

// Resume takes over the acquisition h identifies, taken by this process
// or another, on the same store: it checks there that h's owner still
// holds the lock, renews it to its TTL, and returns a lease supervised
// here as a fresh one is (renewal, loss signal, Err, Done, Context,
// Release), with the same token. opts may change the TTL (WithTTL),
// renewal (WithAutoRenew) and the cap on holding (WithMaxHold, counted
// from now; without it, h's deadline still holds).
//
// When h's lock has expired or another owner holds it, Resume returns an
// error matching ErrNotHeld and nothing on the store changes; past h's
// deadline, one matching ErrMaxHold. A handle of another backend matches
// ErrBadHandle. A backend whose locks live only with the session,
// connection or file descriptor that took them gives ErrUnsupported (see
// the package documentation, Holding across processes).
func (l *Locker) Resume(ctx context.Context, h Handle, opts ...Option) (*Lease, error) {
	r, err := l.handleDriver(h)
	if err != nil {
		return nil, err
	}
	if err := l.check(h.Name, h.Mode); err != nil {
		return nil, err
	}
	cfg := l.cfg
	cfg.ttl = h.TTL
	cfg.maxHold = 0
	if !h.Deadline.IsZero() {
		left := time.Until(h.Deadline)
		if left <= 0 {
			return nil, fmt.Errorf("dlock: resume %q: %w: its deadline %v has passed", h.Name, ErrMaxHold, h.Deadline.Format(time.RFC3339))
		}
		cfg.maxHold = left
	}
	if len(opts) > 0 {
		cfg = cfg.with(opts)
		if cfg.err != nil {
			return nil, cfg.err
		}
	}
	if l.isClosed() {
		return nil, ErrClosed
	}
	req := driver.Request{Name: h.Name, Owner: h.Owner, TTL: cfg.ttl, Mode: h.Mode, Limit: h.Limit}
	g, err := r.Resume(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("dlock: resume %q: %w", h.Name, err)
	}
	g.Token = h.Token
	return newLease(l, req, g, l.observer(ctx, l.m.sets(req.Name)), cfg.autoRenew, cfg.maxHold), nil
}

// handleDriver checks that h's lock can be taken over on this Locker (a
// Resumer backend, the same scheme) and returns the driver.
func (l *Locker) handleDriver(h Handle) (driver.Resumer, error) {
	r, ok := l.drv.(driver.Resumer)
	if !ok {
		return nil, l.notResumable()
	}
	if h.Scheme != l.backend {
		return nil, fmt.Errorf("%w: a handle of the %s backend, not %s", ErrBadHandle, h.Scheme, l.backend)
	}
	return r, nil
}

// notResumable is the error of Resume and Detach without driver.Resumer.
func (l *Locker) notResumable() error {
	return fmt.Errorf("dlock: the %s backend's locks live as long as the session, connection or file that took them, so no other process can resume one: %w", l.backend, ErrUnsupported)
}

// ReleaseHandle releases the lock h stands for, if its acquisition still
// holds it, in one owner-checked call on the store, without resuming a
// lease: the last step of a hold handed from process to process. A lock
// that expired or passed to another owner is left as it is, and the error
// matches ErrNotHeld; h's past deadline does not stop the release. Like
// Resume, it needs a backend whose locks outlive their process.
func (l *Locker) ReleaseHandle(ctx context.Context, h Handle) error {
	if _, err := l.handleDriver(h); err != nil {
		return err
	}
	if err := ValidateName(h.Name); err != nil {
		return err
	}
	if l.isClosed() {
		return ErrClosed
	}
	req := driver.Request{Name: h.Name, Owner: h.Owner, TTL: h.TTL, Mode: h.Mode, Limit: h.Limit}
	if err := l.drv.Unlock(ctx, req); err != nil {
		return fmt.Errorf("dlock: release %q: %w", h.Name, err)
	}
	return nil
}
