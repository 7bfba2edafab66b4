package filelock

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// The waiters of this process, by lock file path, for all Drivers: a
// release wakes its file's waiters directly, and the kernel watcher
// (watch_linux.go) for events of other processes. Driver.mu before reg.mu.
var reg struct {
	mu     sync.Mutex
	n      atomic.Int64 // waiters registered; read without mu by notify
	byPath map[string][]*waiter
}

// A waiter is one Lock call waiting for its lock file.
type waiter struct {
	since  time.Time
	path   string
	dir    string
	wake   chan struct{} // buffered 1: a pending wake-up is never lost
	ref    bool          // holds a reference on the kernel watcher
	events bool          // the kernel watcher watches dir for it
}

// testNoEvents (SetNoEvents) keeps new waiters off the kernel watcher.
var testNoEvents bool

// addWaiter registers a waiter for path in dir, before the attempt that may
// fail: the attempt sees an earlier release, and a later one wakes it.
func addWaiter(path, dir string) *waiter {
	w := &waiter{since: time.Now(), path: path, dir: dir, wake: make(chan struct{}, 1)}
	reg.mu.Lock()
	defer reg.mu.Unlock()
	if reg.byPath == nil {
		reg.byPath = map[string][]*waiter{}
	}
	reg.byPath[path] = append(reg.byPath[path], w)
	reg.n.Add(1)
	if w.ref = !testNoEvents && watchRefLocked(); w.ref {
		w.events = watchAddDirLocked(dir)
	}
	return w
}

// removeWaiter unregisters w.
func removeWaiter(w *waiter) {
	reg.mu.Lock()
	ws := slices.DeleteFunc(reg.byPath[w.path], func(x *waiter) bool { return x == w })
	if len(ws) == 0 {
		delete(reg.byPath, w.path)
	} else {
		reg.byPath[w.path] = ws
	}
	reg.n.Add(-1)
	var stop func()
	if w.events {
		watchRemoveDirLocked(w.dir)
	}
	if w.ref {
		stop = watchUnrefLocked()
	}
	reg.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// notify wakes the process's waiters for path: an atomic load if none.
func notify(path string) {
	if reg.n.Load() == 0 {
		return
	}
	reg.mu.Lock()
	wakeLocked(reg.byPath[path])
	reg.mu.Unlock()
}

// starveAfter is how long a waiter may wait before new acquisitions of its
// process stop overtaking it (as in sync.Mutex's starvation mode).
const starveAfter = time.Millisecond

// starving reports whether a waiter of this process has waited for the
// lock file path longer than starveAfter. flock serves nobody in order: a
// client that releases and at once acquires again beats the waiters its
// release woke, and could keep them out for ever; in one process, at
// least, it can step back.
func starving(path string, now time.Time) bool {
	if reg.n.Load() == 0 {
		return false
	}
	reg.mu.Lock()
	defer reg.mu.Unlock()
	for _, w := range reg.byPath[path] {
		if now.Sub(w.since) > starveAfter {
			return true
		}
	}
	return false
}

// wakeLocked wakes ws without blocking. reg.mu must be held.
func wakeLocked(ws []*waiter) {
	for _, w := range ws {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

// wakeDirLocked wakes every waiter in dir (or all, for ""); reg.mu held.
func wakeDirLocked(dir string) {
	for _, ws := range reg.byPath {
		if len(ws) > 0 && (dir == "" || ws[0].dir == dir) {
			wakeLocked(ws)
		}
	}
}

// watchProcess references the kernel watcher, starting it; false if none.
func watchProcess() bool {
	reg.mu.Lock()
	defer reg.mu.Unlock()
	return watchRefLocked()
}

// unwatchProcess drops a watchProcess reference; the last stops the
// watcher and waits for its goroutine.
func unwatchProcess() {
	reg.mu.Lock()
	stop := watchUnrefLocked()
	reg.mu.Unlock()
	if stop != nil {
		stop()
	}
}
