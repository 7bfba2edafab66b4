// Package objlock is the lock the object-storage backends share (s3lock,
// azurelock, gcslock): one object per lock, whose body records
// the holder, its fencing token and its TTL, changed only by writes the
// store makes conditional on the object's version (an ETag, a
// generation). Each backend supplies a Store over its client; this
// package decides, the same way for all of them:
//
//   - Acquire reads the object. Absent, it creates it (only if still
//     absent); free or expired, it replaces it (only if unchanged since
//     the read). Of two racing acquirers one write succeeds.
//   - Expiry is judged on the store's clock: the object's last-modified
//     time plus the holder's TTL against the time of the store's
//     response, both as precise as the store gives them (Config.Grain,
//     Now), so that no two clients' clocks need agree. The holder counts
//     its own validity on its clock from before its write.
//   - Renew and release are conditional writes on the version the
//     holder last wrote; a failed condition means the lock is gone.
//     Release leaves a free record that keeps the token counter.
//   - Tokens: each grant's is the last one plus one. A lock object that
//     is missing (new, or deleted by an operator) gets as its token the
//     latest the store's time may be at the read that found it missing
//     (Now.Max, in microseconds), and is created once the store's time
//     has passed it: every token of an earlier object of the name is
//     below that time, for that object was created, by the same rule,
//     after its first token's time, and each later grant took a write of
//     more than a microsecond. So the first acquisition of a name waits
//     for the store's clock to pass Now.Max (a second, for stores that
//     give HTTP dates).
package objlock

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlockgo/dlock/driver"
)

// ErrCondition is what a Store's Write returns when its condition failed:
// the object exists (a create) or has another version (a replace).
var ErrCondition = errors.New("objlock: the write's condition failed")

// Object is an object as a Store read it.
type Object struct {
	// Body is the object's content.
	Body []byte
	// Version is what a conditional write compares: the ETag, the
	// generation.
	Version string
	// Modified is the store's time of the object's last write.
	Modified time.Time
}

// Now is the store's time at a response, as bounds: its clock read at
// least Min and less than Max.
type Now struct{ Min, Max time.Time }

// HTTPDate is the Now of a response whose Date header, in whole seconds,
// is date.
func HTTPDate(date time.Time) Now { return Now{date, date.Add(time.Second)} }

// Store is what a backend implements over its store's client.
type Store interface {
	// Read returns the object at key, found false when there is none, and
	// the store's time of its response.
	Read(ctx context.Context, key string) (o Object, found bool, now Now, err error)
	// Write writes body at key if the object's version is version, or,
	// for version "", if there is no object; otherwise it returns an
	// error wrapping ErrCondition. It returns the new version.
	Write(ctx context.Context, key string, body []byte, version string) (string, error)
	// Delete removes the object at key, whatever its version.
	Delete(ctx context.Context, key string) error
	// List returns the keys of the objects whose keys start with prefix.
	List(ctx context.Context, prefix string) ([]string, error)
}

// Config is what a backend tells the shared driver about its store.
type Config struct {
	// Scheme names the backend's URL scheme ("s3"), for metrics and logs.
	Scheme string
	// Package names the backend's package ("s3lock"), for errors.
	Package string
	// Prefix is prepended to every object key the driver writes.
	Prefix string
	// Grain is the precision of the store's last-modified times: a
	// second for stores that give HTTP dates.
	Grain time.Duration
}

// record is a lock object's body.
type record struct {
	Owner string `json:"owner,omitempty"` // empty: free
	Token uint64 `json:"token"`
	TTL   int64  `json:"ttl_ms,omitempty"`
}

func (r record) ttl() time.Duration { return time.Duration(r.TTL) * time.Millisecond }

// hold is what the driver remembers of a lock it holds, by owner.
type hold struct {
	key     string
	version string
	token   uint64
}

// Driver is the shared driver: a driver.Driver, driver.Resumer and
// driver.Inspector over a Store.
type Driver struct {
	store  Store
	cfg    Config
	wrong  string // a version no object has, for Probe (Open's)
	closed atomic.Bool

	mu    sync.Mutex
	holds map[string]hold // by owner
}

// New returns a driver over s.
func New(s Store, c Config) *Driver {
	if c.Grain <= 0 {
		c.Grain = time.Second
	}
	return &Driver{store: s, cfg: c, holds: map[string]hold{}}
}

// Open returns a driver over s, once it has passed a Probe with the
// version wrong, unless noProbe.
func Open(ctx context.Context, s Store, c Config, noProbe bool, wrong string) (*Driver, error) {
	d := New(s, c)
	d.wrong = wrong
	if !noProbe {
		if err := d.Probe(ctx, rand.Text(), wrong); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// URL reads what the URLs of the object stores share: the key prefix
// (the path, without its leading slash and with a trailing one), the
// endpoint parameter (empty, or an absolute URL) and probe (true by
// default).
func URL(u driver.URL) (prefix, endpoint string, probe bool, err error) {
	prefix = strings.TrimPrefix(u.Path, "/")
	if prefix != "" && !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	endpoint = u.String("endpoint", "")
	if endpoint != "" {
		if e, perr := url.Parse(endpoint); perr != nil || e.Scheme == "" || e.Host == "" {
			return "", "", false, u.Err("endpoint", endpoint, errors.New("not an absolute http(s) URL"))
		}
	}
	probe, err = u.Bool("probe", true)
	return prefix, endpoint, probe, err
}

// Scheme implements driver.Schemer.
func (d *Driver) Scheme() string { return d.cfg.Scheme }

// key returns the object key of the mutex called name: its slashes are
// written %2F, so that no lock's key is a folder of another's (stores on
// a file system, such as versitygw's POSIX backend, refuse an object "a"
// beside "a/b").
func (d *Driver) key(name string) string {
	return d.cfg.Prefix + "mutex/" + strings.ReplaceAll(name, "/", "%2F")
}

func (d *Driver) errorf(format string, args ...any) error {
	return fmt.Errorf(d.cfg.Package+": "+format, args...)
}

// check refuses what the driver cannot serve.
func (d *Driver) check(r driver.Request) error {
	switch {
	case d.closed.Load():
		return driver.ErrClosed
	case r.Mode != driver.Exclusive:
		return d.errorf("%s lock %q: %w (an object store changes one object at a time and cannot notify observers: only the mutex is built on it)", r.Mode, r.Name, driver.ErrUnsupported)
	case r.TTL < 2*d.cfg.Grain:
		return d.errorf("lock %q: TTL %v is below %v, twice the precision of the store's times", r.Name, r.TTL, 2*d.cfg.Grain)
	}
	return nil
}

// left is how long the lock in rec, last written at modified, may still
// be held at the store's time now; at most 0 once it has certainly
// expired. modified is truncated to the grain, so a grain is added.
func (d *Driver) left(rec record, modified time.Time, now Now) time.Duration {
	return modified.Add(rec.ttl() + d.cfg.Grain).Sub(now.Min)
}

// TryLock implements driver.Driver: one read of the lock's object, then a
// write conditional on what the read saw (see the package
// documentation). A held lock's error is a *driver.HeldError with the
// holder's remaining time on the store's clock.
func (d *Driver) TryLock(ctx context.Context, r driver.Request) (driver.Grant, error) {
	if err := d.check(r); err != nil {
		return driver.Grant{}, err
	}
	key := d.key(r.Name)
	start := time.Now()
	o, found, now, err := d.store.Read(ctx, key)
	if err != nil {
		return driver.Grant{}, d.errorf("lock %q: read %s: %w", r.Name, key, err)
	}
	var token uint64
	if !found {
		// A new object's token is the latest the store's time may be now,
		// and it is created once that time has come (see the package
		// documentation); 1% more for clocks that run at different rates.
		token = uint64(now.Max.UnixMicro()) + 1
		wait := now.Max.Sub(now.Min)
		if err := sleep(ctx, wait+wait/100); err != nil {
			return driver.Grant{}, err
		}
	} else {
		rec, err := d.decode(key, o)
		if err != nil {
			return driver.Grant{}, err
		}
		if left := d.left(rec, o.Modified, now); rec.Owner != "" && left > 0 {
			return driver.Grant{}, &driver.HeldError{Name: r.Name, Remaining: left}
		}
		token = rec.Token + 1
	}
	body := encode(record{Owner: r.Owner, Token: token, TTL: r.TTL.Milliseconds()})
	v, err := d.store.Write(ctx, key, body, o.Version)
	switch {
	case errors.Is(err, ErrCondition):
		return driver.Grant{}, &driver.HeldError{Name: r.Name} // taken just now
	case err != nil:
		// The outcome is unknown: one read tells whether the write went
		// through. If it did unseen later, the lock expires at its TTL.
		o, found, _, rerr := d.store.Read(ctx, key)
		if rerr != nil || !found || string(o.Body) != string(body) {
			return driver.Grant{}, d.errorf("lock %q: write %s: %w", r.Name, key, err)
		}
		v = o.Version
	}
	d.remember(r.Owner, hold{key: key, version: v, token: token})
	return driver.Grant{Token: token, Expires: start.Add(validity(r.TTL))}, nil
}

// Renew implements driver.Driver: a write of the holder's record,
// conditional on the version of its last write. When that version is not
// known here (a lock resumed from a handle) or has moved, one read finds
// the current version, and the lock is renewed only if it still holds
// r.Owner's unexpired record.
func (d *Driver) Renew(ctx context.Context, r driver.Request) (time.Time, error) {
	start := time.Now()
	if err := d.rewrite(ctx, r, false); err != nil {
		return time.Time{}, err
	}
	return start.Add(validity(r.TTL)), nil
}

// sleep waits for d, or returns ctx's error.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// validity is how long a holder counts its lock valid from before its
// write: the TTL less 1% for clocks that run at different rates.
func validity(ttl time.Duration) time.Duration { return ttl - ttl/100 }

// Resume implements driver.Resumer as Renew.
func (d *Driver) Resume(ctx context.Context, r driver.Request) (driver.Grant, error) {
	return driver.ResumeByRenew(ctx, d, r)
}

// Unlock implements driver.Driver: a free record that keeps the token,
// written on the same condition as Renew's.
func (d *Driver) Unlock(ctx context.Context, r driver.Request) error {
	err := d.rewrite(ctx, r, true)
	d.forget(r.Owner)
	return err
}

// rewrite writes r.Owner's record again (free, for a release) if r.Owner
// still holds the lock.
func (d *Driver) rewrite(ctx context.Context, r driver.Request, free bool) error {
	if err := d.check(r); err != nil {
		return err
	}
	act := "renew"
	if free {
		act = "release"
	}
	h, known := d.held(r.Owner)
	var err error
	if known {
		err = d.write(ctx, r, h, free)
		if err == nil || !errors.Is(err, ErrCondition) {
			return d.wrap(r, act, err)
		}
	}
	h.key = d.key(r.Name)
	o, found, now, err := d.store.Read(ctx, h.key)
	if err != nil {
		return d.errorf("%s %q: read %s: %w", act, r.Name, h.key, err)
	}
	var rec record
	if found {
		if rec, err = d.decode(h.key, o); err != nil {
			return err
		}
	}
	if !found || rec.Owner != r.Owner || d.left(rec, o.Modified, now) <= 0 {
		return d.errorf("%s %q: %w", act, r.Name, driver.ErrNotHeld)
	}
	h.version, h.token = o.Version, rec.Token
	return d.wrap(r, act, d.write(ctx, r, h, free))
}

// write writes the record of h, conditional on h.version, and remembers
// the new version.
func (d *Driver) write(ctx context.Context, r driver.Request, h hold, free bool) error {
	rec := record{Owner: r.Owner, Token: h.token, TTL: r.TTL.Milliseconds()}
	if free {
		rec = record{Token: h.token}
	}
	v, err := d.store.Write(ctx, h.key, encode(rec), h.version)
	if err == nil && !free {
		h.version = v
		d.remember(r.Owner, h)
	}
	return err
}

func (d *Driver) wrap(r driver.Request, act string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrCondition):
		return d.errorf("%s %q: %w", act, r.Name, driver.ErrNotHeld)
	}
	return d.errorf("%s %q: %w", act, r.Name, err)
}

func (d *Driver) remember(owner string, h hold) {
	d.mu.Lock()
	d.holds[owner] = h
	d.mu.Unlock()
}

func (d *Driver) held(owner string) (hold, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	h, ok := d.holds[owner]
	return h, ok
}

func (d *Driver) forget(owner string) {
	d.mu.Lock()
	delete(d.holds, owner)
	d.mu.Unlock()
}

func encode(r record) []byte {
	b, _ := json.Marshal(r)
	return b
}

// decode reads a lock object; another body is an error naming the
// object, so that a prefix shared with other data is seen at once.
func (d *Driver) decode(key string, o Object) (record, error) {
	var r record
	if err := json.Unmarshal(o.Body, &r); err != nil || r.Token == 0 {
		return record{}, d.errorf("object %s is not a dlock lock (%.40q)", key, o.Body)
	}
	if o.Modified.IsZero() {
		return record{}, d.errorf("object %s: the store gave no last-modified time, by which the lock's expiry is judged", key)
	}
	return r, nil
}

// Inspect implements driver.Inspector: one listing of the lock objects
// under the prefix, then one read of each; free and expired locks are
// left out, and Waiters is -1 (waiters poll, unseen by the store).
func (d *Driver) Inspect(ctx context.Context, prefix string) ([]driver.LockInfo, error) {
	if d.closed.Load() {
		return nil, driver.ErrClosed
	}
	base := d.key("")
	keys, err := d.store.List(ctx, d.key(prefix))
	if err != nil {
		return nil, d.errorf("inspect: list %s: %w", d.key(prefix), err)
	}
	var out []driver.LockInfo
	for _, key := range keys {
		o, found, now, err := d.store.Read(ctx, key)
		if err != nil {
			return nil, d.errorf("inspect: read %s: %w", key, err)
		}
		rec, err := d.decode(key, o)
		if !found || err != nil || rec.Owner == "" {
			continue
		}
		if left := d.left(rec, o.Modified, now); left > 0 {
			name := strings.ReplaceAll(strings.TrimPrefix(key, base), "%2F", "/")
			out = append(out, driver.LockInfo{Name: name, Token: rec.Token,
				Owner: rec.Owner, Expires: time.Now().Add(left), Waiters: -1})
		}
	}
	return out, nil
}

// Close implements driver.Driver: later calls fail with driver.ErrClosed.
// The locks still held stay on the store until their TTL runs out.
func (d *Driver) Close() error {
	d.closed.Store(true)
	return nil
}

// errIgnored marks Probe's errors for a store that ignored a condition;
// its text is empty, so that it adds nothing to theirs.
var errIgnored = errors.New("")

// Probe checks that the store honours conditional writes, on an object of
// its own under the driver's prefix: a second create of it, and a replace
// on wrong, a version the object does not have, must both fail. A store
// that accepts them would let two owners hold one lock.
func (d *Driver) Probe(ctx context.Context, id, wrong string) error {
	key := d.cfg.Prefix + "probe/" + id
	defer d.store.Delete(context.WithoutCancel(ctx), key)
	if _, err := d.store.Write(ctx, key, []byte("{}"), ""); err != nil {
		return d.errorf("probe: create %s: %w", key, err)
	}
	if _, err := d.store.Write(ctx, key, []byte("{}"), ""); !errors.Is(err, ErrCondition) {
		return d.errorf("probe: a second create of %s was not refused (%v): the store ignores If-None-Match, so two owners could hold one lock%w", key, err, errIgnored)
	}
	if _, err := d.store.Write(ctx, key, []byte("{}"), wrong); !errors.Is(err, ErrCondition) {
		return d.errorf("probe: a replace of %s on a wrong version was not refused (%v): the store ignores If-Match, so two owners could hold one lock%w", key, err, errIgnored)
	}
	return nil
}

var (
	_ driver.Driver    = (*Driver)(nil)
	_ driver.Resumer   = (*Driver)(nil)
	_ driver.Inspector = (*Driver)(nil)
	_ driver.Schemer   = (*Driver)(nil)
	_ driver.Diagnoser = (*Driver)(nil)
)
