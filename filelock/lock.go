package filelock

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/dlockgo/dlock/driver"
)

// TryLock implements driver.Driver: one non-blocking attempt (for a
// mutex, one flock). A lock held by another owner gives a
// *driver.HeldError with no Remaining: a flock has no expiry, it is held
// until released or its holder's process ends.
func (d *Driver) TryLock(ctx context.Context, r driver.Request) (driver.Grant, error) {
	a, err := d.resolve(r)
	if err != nil {
		return driver.Grant{}, err
	}
	defer a.close()
	why, g, err := a.step(ctx)
	switch {
	case err != nil:
		return driver.Grant{}, err
	case why != stepTaken:
		return driver.Grant{}, &driver.HeldError{Name: r.Name}
	}
	return g, nil
}

// An acquisition is one request, resolved at the driver's entry into the
// files it locks and how. Its files stay open from its first attempt to
// its last, making no close events that would wake other waiters.
type acquisition struct {
	d *Driver
	r driver.Request
	// path is the lock file, which holds a mutex's token; a readers-writer
	// lock also has the writers' gate and the token file (see rw.go).
	path, gatePath, seqPath string
	shared                  bool // a reader: LOCK_SH
	lock, gate              lockFile
	gated                   bool // a writer holding the gate
}

// resolve checks r and resolves it into an acquisition.
func (d *Driver) resolve(r driver.Request) (acquisition, error) {
	a := acquisition{d: d, r: r, lock: lockFile{fd: -1}, gate: lockFile{fd: -1}}
	if err := validate(r.Name); err != nil {
		return a, err
	}
	switch r.Mode {
	case driver.Exclusive:
		a.path = d.path(r.Name, Suffix)
	case driver.Read, driver.Write:
		a.path, a.gatePath, a.seqPath = d.path(r.Name, RWSuffix), d.path(r.Name, GateSuffix), d.path(r.Name, SeqSuffix)
		a.shared = r.Mode == driver.Read
	default:
		return a, fmt.Errorf("filelock: %q: %w: %v locks", r.Name, driver.ErrUnsupported, r.Mode)
	}
	if d.isClosed() {
		return a, driver.ErrClosed
	}
	return a, nil
}

// close drops what a holds, waking the waiters for a writer's gate.
func (a *acquisition) close() {
	a.lock.close()
	if a.gate.fd >= 0 {
		unlockClose(a.gate.fd)
		a.gate.fd, a.gated = -1, false
		notify(a.gatePath)
	}
}

// Why a step did not take the lock.
const (
	stepTaken   = iota
	stepGated   // a writer waits or is about to: wait for the gate
	stepPassing // readers pass the gate: retry soon
	stepHeld    // the lock is held: wait for it
)

// step makes one attempt, then advances the token. A mutex takes its lock
// file exclusively. A reader passes the gate (LOCK_SH, failing while a
// writer waits) and, still in it, takes the lock shared; a writer takes
// the gate and then the lock exclusively, keeping the gate across attempts.
func (a *acquisition) step(ctx context.Context) (int, driver.Grant, error) {
	start := time.Now()
	if a.gatePath != "" && !a.gated {
		ok, err := a.d.attempt(&a.gate, a.gatePath, a.shared)
		if err != nil {
			return 0, driver.Grant{}, err
		}
		if !ok {
			if !a.shared && a.gate.fd >= 0 {
				// Passing readers hold it shared, a waiting writer exclusively.
				if ok, _ := tryFlock(a.gate.fd, true); ok {
					funlock(a.gate.fd)
					return stepPassing, driver.Grant{}, nil
				}
			}
			return stepGated, driver.Grant{}, nil
		}
		a.gated = !a.shared
	}
	ok, err := a.d.attempt(&a.lock, a.path, a.shared)
	if err == nil && ok {
		var tok uint64
		if a.seqPath == "" {
			tok, err = a.d.advance(a.lock.fd, a.path)
		} else {
			tok, err = a.d.rwToken(ctx, a.seqPath)
		}
		if err == nil {
			if a.shared {
				funlock(a.gate.fd)
			}
			g, err := a.d.grant(a, start, tok)
			a.close()
			return stepTaken, g, err
		}
		unlockClose(a.lock.fd)
		a.lock.fd = -1
		notify(a.path)
	}
	if a.shared {
		funlock(a.gate.fd)
	}
	if err != nil {
		return 0, driver.Grant{}, err
	}
	return stepHeld, driver.Grant{}, nil
}

// lockFile is an open lock file and the identity it had when opened.
type lockFile struct {
	fd int // -1: none
	id fileID
}

func (lf *lockFile) close() {
	if lf.fd >= 0 {
		closeFD(lf.fd)
		lf.fd = -1
	}
}

// maxReopen bounds one attempt's chase of a lock file replaced under it.
const maxReopen = 100

// testHookLocked, if set, runs after each flock taken, before the path check.
var testHookLocked func(path string)

// attempt makes one non-blocking attempt to lock the file at path, shared
// (LOCK_SH) or exclusively, through lf, opening it if lf has none: true
// when lf holds the flock on the file path names; else lf stays open on
// that file for the next attempt. A flock locks an inode, not a path: if
// the file was removed or replaced by the time the flock is granted,
// another process can lock the new file, so the attempt starts over.
func (d *Driver) attempt(lf *lockFile, path string, shared bool) (bool, error) {
	for range maxReopen {
		if lf.fd < 0 {
			fd, id, err := openFile(path, d.mode)
			if err != nil {
				return false, err
			}
			lf.fd, lf.id = fd, id
		}
		locked, err := tryFlock(lf.fd, shared)
		if err != nil {
			return false, err
		}
		if locked && testHookLocked != nil {
			testHookLocked(path)
		}
		cur, err := pathID(path)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			if locked {
				unlockClose(lf.fd)
				lf.fd = -1
			}
			return false, err
		}
		if err == nil && cur == lf.id {
			return locked, nil
		}
		if locked {
			unlockClose(lf.fd)
			lf.fd = -1
		} else {
			lf.close()
		}
	}
	return false, fmt.Errorf("filelock: %s was removed or replaced %d times during one attempt", path, maxReopen)
}

// advance advances the token in fd's file (at path): one read and one
// write (and an fsync with Options.Sync).
func (d *Driver) advance(fd int, path string) (uint64, error) {
	var buf [tokenLen]byte
	n, err := readAt(fd, buf[:])
	if err != nil {
		return 0, fmt.Errorf("filelock: read %s: %w", path, err)
	}
	tok := nextToken(buf[:n], time.Now())
	formatToken(&buf, tok)
	if err := writeAt(fd, buf[:], d.sync); err != nil {
		return 0, fmt.Errorf("filelock: write %s: %w", path, err)
	}
	return tok, nil
}

// grant records a.lock's lock, with token tok, taking its fd in any case.
func (d *Driver) grant(a *acquisition, start time.Time, tok uint64) (driver.Grant, error) {
	fd := a.lock.fd
	a.lock.fd = -1
	h := &held{name: a.r.Name, mode: a.r.Mode, path: a.path, fd: fd, id: a.lock.id}
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		unlockClose(fd)
		notify(a.path)
		return driver.Grant{}, driver.ErrClosed
	}
	d.held[a.r.Owner] = h
	d.mu.Unlock()
	return driver.Grant{Token: tok, Expires: start.Add(a.r.TTL)}, nil
}

// Renew implements driver.Driver. A flock does not expire: Renew
// checks that the lock is still the caller's and its path still names the
// locked file, and returns now + TTL, so that a renewal learns of the one
// way to lose a flock, its file removed or replaced: then Renew drops
// the lock and returns an error wrapping driver.ErrNotHeld.
func (d *Driver) Renew(_ context.Context, r driver.Request) (time.Time, error) {
	now := time.Now()
	d.mu.Lock()
	h := d.held[r.Owner]
	d.mu.Unlock()
	if h == nil || h.name != r.Name || h.mode != r.Mode {
		return time.Time{}, fmt.Errorf("%w: %q", driver.ErrNotHeld, r.Name)
	}
	replaced, err := h.check()
	switch {
	case err == nil:
		return now.Add(r.TTL), nil
	case replaced:
		if mine := d.take(r); mine != nil {
			unlockClose(mine.fd)
		}
		return time.Time{}, err
	}
	return time.Time{}, fmt.Errorf("filelock: renew %q: %w", r.Name, err)
}

// Unlock implements driver.Driver: it drops the flock and closes the file,
// which stays (deleted, a process that had just opened it could lock the
// orphaned inode while another locks a new file under the same path). The
// error wraps driver.ErrNotHeld when r does not hold the lock, or its file
// was removed or replaced (the lock is dropped then too).
func (d *Driver) Unlock(_ context.Context, r driver.Request) error {
	h := d.take(r)
	if h == nil {
		return fmt.Errorf("%w: %q", driver.ErrNotHeld, r.Name)
	}
	replaced, err := h.check()
	unlockClose(h.fd)
	notify(h.path)
	if err != nil && !replaced {
		return fmt.Errorf("filelock: unlock %q: the lock was dropped, but its file could not be checked: %w", r.Name, err)
	}
	return err
}

// check returns nil while h's path names the file it locked; an error
// wrapping driver.ErrNotHeld, with replaced, once that file was removed
// or replaced; else the error of the look.
func (h *held) check() (replaced bool, err error) {
	cur, err := pathID(h.path)
	switch {
	case err == nil && cur == h.id:
		return false, nil
	case err == nil || errors.Is(err, fs.ErrNotExist):
		return true, fmt.Errorf("%w: %q: its lock file %s was removed or replaced", driver.ErrNotHeld, h.name, h.path)
	}
	return false, err
}

// take removes and returns r's lock, or nil if r does not hold it.
func (d *Driver) take(r driver.Request) *held {
	d.mu.Lock()
	defer d.mu.Unlock()
	h := d.held[r.Owner]
	if h == nil || h.name != r.Name || h.mode != r.Mode {
		return nil
	}
	delete(d.held, r.Owner)
	return h
}
