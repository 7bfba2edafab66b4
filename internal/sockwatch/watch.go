package pglock

import (
	"crypto/tls"
	"errors"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// A sockWatch watches the socket of a held lock's connection while no
// query runs on it, so that the hold learns of the server closing the
// connection (pg_terminate_backend, a restart, an idle timeout) from the
// socket itself, within about a round trip, rather than at its next
// keep-alive ping.
//
// It never reads: every look is a recv with MSG_PEEK, so the bytes that
// pgx needs stay in the socket for pgx. A look tells one of three things
// (see verdict): nothing to read (the connection may be fine), the server
// hung up (end of stream, a socket error, or, on a plain connection, an
// ErrorResponse: a server sends that unprompted only when it ends the
// session), or other bytes, which only pgx can read (a NoticeResponse, a
// ParameterStatus, anything under TLS): the keeper then sends a ping, which
// reads them and fails if the session has ended.
//
// The keeper goroutine waits in wait, through syscall.RawConn.Read, for
// the socket to become readable; pause takes the socket away from it
// before a query (and give it back with resume), since pgx and the
// watcher must not read at once. Check's look (look) goes through
// RawConn.Control, which does not wait for the watcher, and an atomic
// state keeps it away from a running query, whose reply it would misread.
type sockWatch struct {
	raw    net.Conn        // the socket, under any TLS
	rc     syscall.RawConn // nil: the socket cannot be watched
	opaque bool            // TLS: the bytes are not the protocol's frames

	// state is idle (a look may run), looking (one runs) or busy (a
	// query runs, or the hold has ended: no look).
	state atomic.Int32

	mu      sync.Mutex
	cond    sync.Cond // signals changes of paused, waiting, stopped
	paused  bool      // a query has the socket
	waiting bool      // the keeper is inside rc.Read
	stopped bool      // the hold ended: wait returns at once

	// The keeper's look (only the keeper touches these) and Check's (only
	// the holder of state looking does). Their callbacks are made once, so
	// that a look does not allocate.
	wbuf, lbuf   [8]byte
	wres, lres   verdict
	readFn       func(fd uintptr) bool
	lookFn       func(fd uintptr)
	wcause, lerr syscall.Errno
}

// States of sockWatch.state.
const (
	stIdle int32 = iota
	stLooking
	stBusy
)

// A verdict is what a look at the socket found.
type verdict uint8

const (
	vQuiet verdict = iota // nothing to read
	vGone                 // the server hung up, or the socket failed
	vData                 // bytes that only the protocol's reader can judge
)

// An event is why wait returned.
type event uint8

const (
	evStopped  event = iota // the hold ended
	evDeadline              // the deadline passed: time for a keep-alive ping
	evGone                  // the server hung up
	evData                  // unsolicited bytes: look closer
)

// longAgo is a deadline in the past: it ends a wait at once.
var longAgo = time.Unix(1, 0)

// newSockWatch returns the watch of the socket raw, under the connection
// pgx uses, top (raw itself, or a *tls.Conn over it). It watches nothing
// (rc nil) on systems without a peek (see peek) or when the socket is not
// raw's or offers no syscall.RawConn.
func newSockWatch(raw, top net.Conn) *sockWatch {
	w := &sockWatch{raw: raw}
	w.cond.L = &w.mu
	w.state.Store(stBusy) // until the hold is granted: see start
	if !canPeek || raw == nil {
		return w
	}
	switch t := top.(type) {
	case *tls.Conn:
		if t.NetConn() != raw {
			return w
		}
		w.opaque = true
	default:
		if top != raw {
			return w
		}
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
		v, errno := lookAt(fd, w.wbuf[:], w.opaque)
		if v == vQuiet {
			return false // wait for the socket to become readable
		}
		w.wres, w.wcause = v, errno
		return true
	}
	w.lookFn = func(fd uintptr) { w.lres, w.lerr = lookAt(fd, w.lbuf[:], w.opaque) }
	return w
}

// watched reports whether the socket is watched.
func (w *sockWatch) watched() bool { return w.rc != nil }

// start lets looks begin: the lock is held and no query runs.
func (w *sockWatch) start() { w.state.Store(stIdle) }

// lookAt peeks at fd and judges what is there.
func lookAt(fd uintptr, buf []byte, opaque bool) (verdict, syscall.Errno) {
	n, errno := peek(fd, buf)
	switch {
	case errno == syscall.EAGAIN || errno == syscall.EWOULDBLOCK:
		return vQuiet, 0
	case errno != 0, n == 0: // a socket error, or the end of the stream
		return vGone, errno
	case !opaque && buf[0] == 'E':
		// An ErrorResponse while no query runs: the server is ending the
		// session (FATAL), and closes the connection next.
		return vGone, 0
	}
	return vData, 0
}

// look makes one non-blocking look at the socket for Check: vQuiet when
// the socket is not watched, a query runs on it (its reply would be
// misread; the query finds out for itself) or another look runs.
func (w *sockWatch) look() (verdict, syscall.Errno) {
	if w.rc == nil || !w.state.CompareAndSwap(stIdle, stLooking) {
		return vQuiet, 0
	}
	w.lres, w.lerr = vQuiet, 0
	if err := w.rc.Control(w.lookFn); err != nil {
		w.lres = vQuiet // the socket is closed here: the hold is ending anyway
	}
	v, errno := w.lres, w.lerr
	w.state.Store(stIdle)
	return v, errno
}

// wait blocks until the socket is readable, deadline passes or the watch
// stops; it sits out pauses, and watches again after each.
func (w *sockWatch) wait(deadline time.Time) (event, syscall.Errno) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for {
		for w.paused && !w.stopped {
			w.cond.Wait()
		}
		switch {
		case w.stopped:
			return evStopped, 0
		case !time.Now().Before(deadline):
			return evDeadline, 0
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
			return evStopped, 0
		case w.paused:
			continue // a query took the socket: watch again after it
		case errors.Is(err, os.ErrDeadlineExceeded):
			return evDeadline, 0
		case err != nil: // the socket was closed under the watch
			return evGone, 0
		case w.wres == vGone:
			return evGone, w.wcause
		}
		return evData, 0
	}
}

// pause takes the socket from the watch for a query: when it returns, no
// look runs and the keeper is out of rc.Read, with no read deadline left
// on the socket. Queries on a hold's connection run one at a time (the
// hold's use slot), so pauses never overlap.
func (w *sockWatch) pause() {
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

// resume gives the socket back to the watch after a query.
func (w *sockWatch) resume() {
	w.mu.Lock()
	w.paused = false
	stopped := w.stopped
	w.cond.Broadcast()
	w.mu.Unlock()
	if !stopped {
		w.state.Store(stIdle)
	}
}

// stop ends the watch for good: wait returns evStopped and no look runs.
// The caller has paused the watch, or is about to close the socket.
func (w *sockWatch) stop() {
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
