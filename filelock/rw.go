package filelock

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/dlockgo/dlock/driver"
)

// The files of the readers-writer lock called name, next to its mutex's
// (which is name + Suffix): the lock itself, where readers hold LOCK_SH
// and a writer LOCK_EX; the writers' gate, where a waiting writer holds
// LOCK_EX and a reader takes LOCK_SH for an instant to check that no
// writer waits; and the token file, where every grant advances the fencing
// token under a LOCK_EX held for one read and one write. A name never
// maps to a mutex's file: those end in ".lock", and these end in "rw"
// followed by a word.
const (
	RWSuffix   = ".rwlock"
	GateSuffix = ".rwgate"
	SeqSuffix  = ".rwseq"
)

// Supports implements driver.Moder: the driver has the mutex and the
// readers-writer lock (driver.Read and driver.Write), not semaphores or
// elections.
func (d *Driver) Supports(m driver.Mode) bool {
	return m == driver.Exclusive || m == driver.Read || m == driver.Write
}

func checkMode(r driver.Request) error {
	if r.Mode == driver.Exclusive || r.Mode == driver.Read || r.Mode == driver.Write {
		return nil
	}
	return fmt.Errorf("filelock: %q: %w: %v locks", r.Name, driver.ErrUnsupported, r.Mode)
}

// pathWith returns the file of a valid name with suffix.
func (d *Driver) pathWith(name, suffix string) string {
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

// An rwAttempt is one acquisition of a readers-writer lock, from its first
// attempt to its last: the gate and the lock file stay open meanwhile, so
// that its attempts make no close events that would wake the other
// waiters for nothing.
type rwAttempt struct {
	d                  *Driver
	r                  driver.Request
	gatePath, lockPath string
	gate, lock         lockFile
	gated              bool // a writer holding the gate
}

func (d *Driver) newRWAttempt(r driver.Request) *rwAttempt {
	return &rwAttempt{
		d: d, r: r,
		gatePath: d.pathWith(r.Name, GateSuffix),
		lockPath: d.pathWith(r.Name, RWSuffix),
		gate:     lockFile{fd: -1},
		lock:     lockFile{fd: -1},
	}
}

// close drops what the attempt still holds; a writer's gate wakes the
// readers and writers that wait for it.
func (a *rwAttempt) close() {
	a.lock.close()
	if a.gate.fd >= 0 {
		unlockClose(a.gate.fd)
		a.gate.fd, a.gated = -1, false
		notify(a.gatePath)
	}
}

// Why a step did not take the lock.
const (
	rwTaken   = iota
	rwGated   // a writer waits or is about to: wait for the gate
	rwPassing // readers pass the gate: retry soon
	rwHeld    // the lock is held: wait for it
)

// step makes one attempt. A reader passes the gate (LOCK_SH, which fails
// while a writer waits) and, still in it, takes the lock shared; a writer
// takes the gate exclusively, keeps it across attempts, and then takes
// the lock exclusively. Either then advances the token.
func (a *rwAttempt) step(ctx context.Context) (int, driver.Grant, error) {
	start := time.Now()
	writer := a.r.Mode == driver.Write
	if !a.gated {
		ok, err := a.d.attemptHow(&a.gate, a.gatePath, !writer)
		if err != nil {
			return 0, driver.Grant{}, err
		}
		if !ok {
			if writer && a.gate.fd >= 0 {
				// Readers passing the gate hold it shared for an instant;
				// a writer waiting in it holds it exclusively.
				if ok, _ := tryFlockHow(a.gate.fd, true); ok {
					funlock(a.gate.fd)
					return rwPassing, driver.Grant{}, nil
				}
			}
			return rwGated, driver.Grant{}, nil
		}
		a.gated = writer
	}
	ok, err := a.d.attemptHow(&a.lock, a.lockPath, !writer)
	if err == nil && ok {
		var tok uint64
		tok, err = a.d.rwToken(ctx, a.r.Name)
		if err == nil {
			if !writer {
				funlock(a.gate.fd)
			}
			g, err := a.d.grantFD(&a.lock, a.r, a.lockPath, start, tok)
			a.close()
			return rwTaken, g, err
		}
		unlockClose(a.lock.fd)
		a.lock.fd = -1
		notify(a.lockPath)
	}
	if !writer {
		funlock(a.gate.fd)
	}
	if err != nil {
		return 0, driver.Grant{}, err
	}
	return rwHeld, driver.Grant{}, nil
}

// tryRW is TryLock for Read and Write.
func (d *Driver) tryRW(ctx context.Context, r driver.Request) (driver.Grant, error) {
	a := d.newRWAttempt(r)
	defer a.close()
	why, g, err := a.step(ctx)
	switch {
	case err != nil:
		return driver.Grant{}, err
	case why != rwTaken:
		return driver.Grant{}, &driver.HeldError{Name: r.Name}
	}
	return g, nil
}

// passingRetry is how soon a writer tries the gate again when readers
// were passing it.
const passingRetry = 100 * time.Microsecond

// lockRW is Lock for Read and Write: the waiting of Lock (wake-ups from
// releases in this process and from the kernel watcher, with the
// backstop timer), on the gate and on the lock file.
func (d *Driver) lockRW(ctx context.Context, r driver.Request) (driver.Grant, error) {
	if d.isClosed() {
		return driver.Grant{}, driver.ErrClosed
	}
	a := d.newRWAttempt(r)
	defer a.close()
	why, g, err := a.step(ctx)
	if err != nil || why == rwTaken {
		return g, err
	}
	d.mu.Lock()
	closed := d.closed
	if !closed && !d.watching {
		d.watching = watchProcess()
	}
	d.mu.Unlock()
	if closed {
		return driver.Grant{}, driver.ErrClosed
	}
	wg := addWaiter(a.gatePath, d.dir)
	defer removeWaiter(wg)
	wl := addWaiter(a.lockPath, d.dir)
	defer removeWaiter(wl)
	maxDelay := maxBackstop
	if !wg.events || !wl.events {
		maxDelay = maxBackstopBlind
	}
	delay := minBackstop
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		if err := ctx.Err(); err != nil {
			return driver.Grant{}, err
		}
		why, g, err := a.step(ctx)
		if err != nil || why == rwTaken {
			return g, err
		}
		wait := delay
		if why == rwPassing {
			wait = passingRetry
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return driver.Grant{}, ctx.Err()
		case <-d.done:
			return driver.Grant{}, driver.ErrClosed
		case <-wg.wake:
			delay = minBackstop
		case <-wl.wake:
			delay = minBackstop
		case <-timer.C:
			if why != rwPassing {
				delay = min(2*delay, maxDelay)
			}
		}
	}
}

// rwToken advances the token of readers-writer lock name in its token
// file, under an exclusive flock held for one read and one write. The
// flock is tried without blocking, again after a pause from 20µs doubling
// to a millisecond, until ctx ends: whoever holds it lets it go within
// microseconds, unless its process is stopped right then.
func (d *Driver) rwToken(ctx context.Context, name string) (uint64, error) {
	path := d.pathWith(name, SeqSuffix)
	lf := lockFile{fd: -1}
	defer lf.close()
	pause := 20 * time.Microsecond
	for {
		ok, err := d.attempt(&lf, path)
		if err != nil {
			return 0, err
		}
		if ok {
			break
		}
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		time.Sleep(pause)
		pause = min(2*pause, time.Millisecond)
	}
	defer funlock(lf.fd)
	var buf [tokenLen]byte
	n, err := readAt(lf.fd, buf[:])
	if err != nil {
		return 0, fmt.Errorf("filelock: read %s: %w", path, err)
	}
	tok := nextToken(buf[:n], time.Now())
	formatToken(&buf, tok)
	if err := writeAt(lf.fd, buf[:], d.sync); err != nil {
		return 0, fmt.Errorf("filelock: write %s: %w", path, err)
	}
	return tok, nil
}
