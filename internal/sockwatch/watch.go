package sockwatch

import (
	"errors"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// A Watch watches the socket of a held lock's connection while no
// statement runs on it (see the package documentation). Its methods are
// safe for concurrent use in the pattern the backends follow: one
// goroutine in Wait, statements bracketed by Pause and Resume one at a
// time, and any number of Looks.
type Watch struct {
	raw    net.Conn        // the socket, under any TLS
	rc     syscall.RawConn // nil: the socket cannot be watched
	opaque bool            // TLS or compression: the bytes are not the protocol's frames
	ended  func(frame []byte) bool

	// state is idle (a look may run), looking (one runs) or busy (a
	// statement runs, or the lock has ended: no look).
	state atomic.Int32

	mu      sync.Mutex
	cond    sync.Cond // signals changes of paused, waiting, stopped
	paused  bool      // a statement has the socket
	waiting bool      // the waiting goroutine is inside rc.Read
	stopped bool      // the lock ended: Wait returns at once

	// Wait's look (only its goroutine touches these) and Look's (only the
	// holder of state looking does). Their callbacks are made once, so
	// that a look does not allocate.
	wbuf, lbuf   [8]byte
	wres, lres   Verdict
	readFn       func(fd uintptr) bool
	lookFn       func(fd uintptr)
	wcause, lerr syscall.Errno
}

// States of Watch.state.
const (
	stIdle int32 = iota
	stLooking
	stBusy
)

// A Verdict is what a look at the socket found.
type Verdict uint8

const (
	VQuiet Verdict = iota // nothing to read
	VGone                 // the server hung up, or the socket failed
	VData                 // bytes that only the protocol's reader can judge
)

// An Event is why Wait returned.
type Event uint8

const (
	EvStopped  Event = iota // the watch was stopped: the lock ended
	EvDeadline              // the deadline passed
	EvGone                  // the server hung up, or the socket failed
	EvData                  // unsolicited bytes: look closer
)

// longAgo is a deadline in the past: it ends a wait at once.
var longAgo = time.Unix(1, 0)

// New returns a watch of the socket raw (nil: none known), which starts
// busy: no look runs until Start. opaque says that raw's bytes are not the
// protocol's frames (TLS, compression). ended, for a connection that is
// not opaque, judges the first bytes of unsolicited data (one to eight of
// them, as many as have arrived): true when they are the start of a frame
// that a server sends unprompted only as it ends the session, such as an
// error (nil: none does). ended must not allocate, nor keep frame.
//
// The watch watches nothing (Watched is false) on systems without a peek,
// or when raw offers no syscall.RawConn.
func New(raw net.Conn, opaque bool, ended func(frame []byte) bool) *Watch {
	w := &Watch{raw: raw, opaque: opaque, ended: ended}
	w.cond.L = &w.mu
	w.state.Store(stBusy) // until the lock is held: see Start
	if !canPeek || raw == nil {
		return w
	}
	sc, ok := raw.(syscall.Conn)
	if !ok {
		return w
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return w
	}
	w.rc = rc
	w.readFn = func(fd uintptr) bool {
		v, errno := w.lookAt(fd, w.wbuf[:])
		if v == VQuiet {
			return false // wait for the socket to become readable
		}
		w.wres, w.wcause = v, errno
		return true
	}
	w.lookFn = func(fd uintptr) { w.lres, w.lerr = w.lookAt(fd, w.lbuf[:]) }
	return w
}

// Watched reports whether the socket is watched. When it is not, Look
// always finds VQuiet, and Wait must not be called.
func (w *Watch) Watched() bool { return w.rc != nil }

// Start lets looks begin: the lock is held and no statement runs.
func (w *Watch) Start() { w.state.Store(stIdle) }

// lookAt peeks at fd and judges what is there.
func (w *Watch) lookAt(fd uintptr, buf []byte) (Verdict, syscall.Errno) {
	n, errno := peek(fd, buf)
	switch {
	case errno == syscall.EAGAIN || errno == syscall.EWOULDBLOCK:
		return VQuiet, 0
	case errno != 0, n == 0: // a socket error, or the end of the stream
		return VGone, errno
	case !w.opaque && w.ended != nil && w.ended(buf[:n]):
		// The server is ending the session, and closes the connection next.
		return VGone, 0
	}
	return VData, 0
}

// Look makes one non-blocking look at the socket, for the lock's Check;
// with VGone, the errno is the socket's error, if any. It finds VQuiet
// when the socket is not watched, a statement runs on it (its reply would
// be misread; the statement finds out for itself) or another look runs.
// It does not allocate.
func (w *Watch) Look() (Verdict, syscall.Errno) {
	if w.rc == nil || !w.state.CompareAndSwap(stIdle, stLooking) {
		return VQuiet, 0
	}
	w.lres, w.lerr = VQuiet, 0
	if err := w.rc.Control(w.lookFn); err != nil {
		w.lres = VQuiet // the socket is closed here: the lock is ending anyway
	}
	v, errno := w.lres, w.lerr
	w.state.Store(stIdle)
	return v, errno
}

// Wait blocks until the socket is readable, deadline (if not zero) passes
// or the watch stops; it sits out pauses, and watches again after each.
// With EvGone, the errno is the socket's error, if any. Only one goroutine
// may wait, and only on a watched socket (see Watched).
func (w *Watch) Wait(deadline time.Time) (Event, syscall.Errno) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for {
		for w.paused && !w.stopped {
			w.cond.Wait()
		}
		switch {
		case w.stopped:
			return EvStopped, 0
		case !deadline.IsZero() && !time.Now().Before(deadline):
			return EvDeadline, 0
		}
		w.waiting = true
		_ = w.raw.SetReadDeadline(deadline)
		w.mu.Unlock()
		err := w.rc.Read(w.readFn)
		w.mu.Lock()
		w.waiting = false
		w.cond.Broadcast()
		switch {
		case w.stopped:
			return EvStopped, 0
		case w.paused:
			continue // a statement took the socket: watch again after it
		case errors.Is(err, os.ErrDeadlineExceeded):
			return EvDeadline, 0
		case err != nil: // the socket was closed under the watch
			return EvGone, 0
		case w.wres == VGone:
			return EvGone, w.wcause
		}
		return EvData, 0
	}
}

// Pause takes the socket from the watch for a statement: when it returns,
// no look runs and the waiting goroutine is out of rc.Read, with no read
// deadline left on the socket. The caller runs statements on the
// connection one at a time, so that pauses never overlap.
func (w *Watch) Pause() {
	for !w.state.CompareAndSwap(stIdle, stBusy) && w.state.Load() != stBusy {
		runtime.Gosched() // a look is one system call
	}
	w.mu.Lock()
	w.paused = true
	if w.waiting {
		_ = w.raw.SetReadDeadline(longAgo) // ends the wait at once
		for w.waiting {
			w.cond.Wait()
		}
	}
	if w.rc != nil { // else nothing watched, nor set a deadline
		_ = w.raw.SetReadDeadline(time.Time{})
	}
	w.mu.Unlock()
}

// Resume gives the socket back to the watch after a statement.
func (w *Watch) Resume() {
	w.mu.Lock()
	w.paused = false
	stopped := w.stopped
	w.cond.Broadcast()
	w.mu.Unlock()
	if !stopped {
		w.state.Store(stIdle)
	}
}

// Stop ends the watch for good: Wait returns EvStopped and no look runs.
// The caller has paused the watch, or is about to close the socket.
func (w *Watch) Stop() {
	for !w.state.CompareAndSwap(stIdle, stBusy) && w.state.Load() != stBusy {
		runtime.Gosched()
	}
	w.mu.Lock()
	w.stopped = true
	if w.waiting {
		_ = w.raw.SetReadDeadline(longAgo)
	}
	w.cond.Broadcast()
	w.mu.Unlock()
}
