package filelock

import "time"

// Crash makes the driver stop as a dying process would: it closes the
// files of its locks without unlocking them (the kernel then drops the
// flocks) and forgets them, so that its leases learn of the loss at their
// next renewal.
func (d *Driver) Crash() {
	d.mu.Lock()
	hs := d.held
	d.held = map[string]*held{}
	d.mu.Unlock()
	for _, h := range hs {
		closeFD(h.fd)
	}
}

// Held returns how many locks the driver holds.
func (d *Driver) Held() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.held)
}

// Waiters returns how many waits of this process are registered.
func Waiters() int64 { return reg.n.Load() }

// WatcherActive reports whether the process's kernel watcher runs.
func WatcherActive() bool {
	reg.mu.Lock()
	defer reg.mu.Unlock()
	return watcherActive()
}

// SetLockedHook makes f run after each successful flock, before the check
// that the path still names the locked file; restore undoes it. Not safe
// to call while locks are being taken.
func SetLockedHook(f func(path string)) (restore func()) {
	old := testHookLocked
	testHookLocked = f
	return func() { testHookLocked = old }
}

// SetBackstop makes waits started from now on retry every d when nothing
// wakes them; restore undoes it. Not safe to call while locks are being
// waited for.
func SetBackstop(d time.Duration) (restore func()) {
	oldMin, oldMax, oldBlind := minBackstop, maxBackstop, maxBackstopBlind
	minBackstop, maxBackstop, maxBackstopBlind = d, d, d
	return func() { minBackstop, maxBackstop, maxBackstopBlind = oldMin, oldMax, oldBlind }
}

// SetNoEvents keeps waits started from now on off the kernel watcher, so
// that only a release in this process (or the backstop) wakes them;
// restore undoes it. Not safe to call while locks are being waited for.
func SetNoEvents() (restore func()) {
	testNoEvents = true
	return func() { testNoEvents = false }
}
