package filelock

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/dlockgo/dlock/driver"
)

// TryLock implements driver.Driver: one non-blocking flock. A lock held by
// another owner gives a *driver.HeldError with no Remaining: a flock has
// no expiry, it is held until released or its holder's process ends.
func (d *Driver) TryLock(ctx context.Context, r driver.Request) (driver.Grant, error) {
	if err := validate(r.Name); err != nil {
		return driver.Grant{}, err
	}
	if err := checkMode(r); err != nil {
		return driver.Grant{}, err
	}
	if d.isClosed() {
		return driver.Grant{}, driver.ErrClosed
	}
	if r.Mode != driver.Exclusive {
		return d.tryRW(ctx, r)
	}
	start := time.Now()
	path := d.path(r.Name)
	lf := lockFile{fd: -1}
	ok, err := d.attempt(&lf, path)
	if err != nil || !ok {
		lf.close()
		if err != nil {
			return driver.Grant{}, err
		}
		return driver.Grant{}, &driver.HeldError{Name: r.Name}
	}
	return d.grant(&lf, r, path, start)
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

// maxReopen bounds how often one attempt follows a lock file that keeps
// being removed or replaced under it.
const maxReopen = 100

// testHookLocked, if set, runs after each successful flock, before the
// check that the path still names the locked file.
var testHookLocked func(path string)

// attempt makes one non-blocking attempt to lock the file at path through
// lf, opening it if lf has none. It returns true when lf holds the flock
// on the file that path names. Otherwise lf stays open on that file, ready
// for the next attempt.
//
// A flock locks an inode, not a path: after it is granted, the path must
// still name the locked inode. If the file was removed or replaced
// meanwhile, the lock is worthless (another process can create and lock
// the new file) and the attempt starts over on the file the path names
// now.
func (d *Driver) attempt(lf *lockFile, path string) (bool, error) {
	return d.attemptHow(lf, path, false)
}

// attemptHow is attempt for a shared (LOCK_SH) or exclusive flock.
func (d *Driver) attemptHow(lf *lockFile, path string, shared bool) (bool, error) {
	for range maxReopen {
		if lf.fd < 0 {
			fd, id, err := openFile(path, d.mode)
			if err != nil {
				return false, err
			}
			lf.fd, lf.id = fd, id
		}
		locked, err := tryFlockHow(lf.fd, shared)
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

// grant completes an acquisition whose flock lf holds: it advances the
// fencing token in the file and records the lock. It takes lf's
// descriptor: on return lf is empty, whatever the outcome.
func (d *Driver) grant(lf *lockFile, r driver.Request, path string, start time.Time) (driver.Grant, error) {
	fd := lf.fd
	lf.fd = -1
	var buf [tokenLen]byte
	n, err := readAt(fd, buf[:])
	if err != nil {
		unlockClose(fd)
		return driver.Grant{}, fmt.Errorf("filelock: read %s: %w", path, err)
	}
	tok := nextToken(buf[:n], time.Now())
	formatToken(&buf, tok)
	if err := writeAt(fd, buf[:], d.sync); err != nil {
		unlockClose(fd)
		return driver.Grant{}, fmt.Errorf("filelock: write %s: %w", path, err)
	}
	lf.fd = fd
	return d.grantFD(lf, r, path, start, tok)
}

// grantFD records the lock whose flock lf holds, with token tok. It takes
// lf's descriptor: on return lf is empty, whatever the outcome.
func (d *Driver) grantFD(lf *lockFile, r driver.Request, path string, start time.Time, tok uint64) (driver.Grant, error) {
	fd := lf.fd
	lf.fd = -1
	h := &held{name: r.Name, mode: r.Mode, path: path, fd: fd, id: lf.id}
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		unlockClose(fd)
		notify(path)
		return driver.Grant{}, driver.ErrClosed
	}
	d.held[r.Owner] = h
	d.mu.Unlock()
	return driver.Grant{Token: tok, Expires: start.Add(r.TTL)}, nil
}

// Refresh implements driver.Driver. A flock does not expire, so there is
// nothing to extend: Refresh checks that the lock is still the caller's
// and that its path still names the locked file, and returns now + TTL.
// This is how a Locker's renewal learns that a lock file was removed or
// replaced (the one way to lose a flock): then Refresh drops the lock and
// returns an error wrapping driver.ErrNotHeld.
func (d *Driver) Refresh(_ context.Context, r driver.Request) (time.Time, error) {
	now := time.Now()
	d.mu.Lock()
	h := d.held[r.Owner]
	d.mu.Unlock()
	if h == nil || h.name != r.Name || h.mode != r.Mode {
		return time.Time{}, fmt.Errorf("%w: %q", driver.ErrNotHeld, r.Name)
	}
	cur, err := pathID(h.path)
	switch {
	case err == nil && cur == h.id:
		return now.Add(r.TTL), nil
	case err == nil || errors.Is(err, fs.ErrNotExist):
		if mine := d.take(r); mine != nil {
			unlockClose(mine.fd)
		}
		return time.Time{}, fmt.Errorf("%w: %q: its lock file %s was removed or replaced", driver.ErrNotHeld, r.Name, h.path)
	default:
		return time.Time{}, fmt.Errorf("filelock: refresh %q: %w", r.Name, err)
	}
}

// Unlock implements driver.Driver: it drops the flock and closes the file,
// which stays in the directory. Lock files are never deleted: a process
// that opened the file just before its deletion could then lock the
// orphaned inode while another locks a new file under the same path.
// Unlock returns an error wrapping driver.ErrNotHeld when r does not hold
// the lock, or when its file was removed or replaced (the lock is dropped
// then too).
func (d *Driver) Unlock(_ context.Context, r driver.Request) error {
	h := d.take(r)
	if h == nil {
		return fmt.Errorf("%w: %q", driver.ErrNotHeld, r.Name)
	}
	cur, err := pathID(h.path)
	unlockClose(h.fd)
	notify(h.path)
	switch {
	case err == nil && cur == h.id:
		return nil
	case err == nil || errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%w: %q: its lock file %s was removed or replaced", driver.ErrNotHeld, r.Name, h.path)
	default:
		return fmt.Errorf("filelock: unlock %q: the lock was dropped, but its file could not be checked: %w", r.Name, err)
	}
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
