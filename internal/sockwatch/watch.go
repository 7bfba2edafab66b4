package sockwatch

import (
	"errors"
	"math/bits"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// A Watch watches the socket of a held lock's connection (see the package
// documentation), safe for concurrent use as the backends use it: one
// goroutine in Wait, statements one at a time between Take (or Pause) and
// Resume, and any number of Looks.
type Watch struct {
	raw    net.Conn        // the socket, under any TLS
	rc     syscall.RawConn // nil: the socket cannot be watched
	opaque bool            // TLS or compression: the bytes are not the protocol's frames
	ended  func(frame []byte) bool

	// state lets a look and a statement decide against each other with
	// one atomic operation: stBusy (a statement has the socket, or the
	// lock ended: no look starts) and the look slots in use (low nSlots
	// bits). Looks (recv with MSG_PEEK) may run at once; a statement sets
	// stBusy, then waits for the looks begun before.
	state atomic.Uint32
	slots [nSlots]lookSlot

	mu      sync.Mutex
	cond    sync.Cond // signals changes of paused, waiting, stopped
	paused  bool      // a statement has the socket
	waiting bool      // the waiting goroutine is inside rc.Read
	stopped bool      // the lock ended: Wait returns at once

	// Wait's and Take's looks; callbacks are made once, not to allocate.
	wait, take lookSlot // wait's callback is readFn
	readFn     func(fd uintptr) bool

	// stream is raw as a Stream the driver reads through, unless opaque.
	stream *Stream
	// closed is set for good once stateFn found the session ended while a
	// statement had the socket.
	closed  atomic.Bool
	stateFn func(fd uintptr)
}

// A lookSlot is one look's own buffer and callback, so that concurrent
// looks neither share nor allocate; a Look owns the slot whose bit it set
// in Watch.state until it clears the bit.
type lookSlot struct {
	buf [8]byte
	res Verdict
	err syscall.Errno
	fn  func(fd uintptr) // made at the slot's first use, then kept
}

// The parts of Watch.state: the look slots in use, and stBusy.
const (
	nSlots   = 16 // looks that may run at once
	slotBits = 1<<nSlots - 1
	stBusy   = uint32(1) << 31
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

// New returns a watch of the socket raw (nil: none known), busy until
// Start. opaque says raw's bytes are not the protocol's frames (TLS,
// compression). ended, unless opaque, judges the first one to eight bytes
// of unsolicited data: true for the start of a frame a server sends
// unprompted only as it ends the session, such as an error (nil: none
// does); it must not allocate, nor keep frame. Without a peek on this
// system, or a syscall.RawConn from raw, nothing is watched (Watched).
func New(raw net.Conn, opaque bool, ended func(frame []byte) bool) *Watch {
	w := &Watch{raw: raw, opaque: opaque, ended: ended}
	if s, ok := raw.(*Stream); ok && !opaque {
		w.stream = s
	}
	w.cond.L = &w.mu
	w.state.Store(stBusy) // until the lock is held: see Start
	if w.rc = rawConn(raw); w.rc == nil {
		return w
	}
	w.readFn = func(fd uintptr) bool {
		v, errno := w.lookAt(fd, w.wait.buf[:])
		if v == VQuiet {
			return false // wait for the socket to become readable
		}
		w.wait.res, w.wait.err = v, errno
		return true
	}
	w.take.fn = func(fd uintptr) { w.take.res, w.take.err = w.lookAt(fd, w.take.buf[:]) }
	w.stateFn = func(fd uintptr) {
		if peerClosed(fd) || w.stream != nil && w.stream.queuedEnd(fd) {
			w.closed.Store(true)
		}
	}
	return w
}

// Watched reports whether the socket is watched: if not, Look finds
// VQuiet, and Wait must not be called.
func (w *Watch) Watched() bool { return w.rc != nil }

// Ended reports whether the watch has found that the server ended the
// session while a statement had the socket (its close, or on a Stream a
// frame that ends the session, read with the statement's reply or queued
// behind it), without looking again.
func (w *Watch) Ended() bool {
	return w.closed.Load() || w.stream != nil && w.stream.ended.Load()
}

// Start lets looks begin: the lock is held and no statement runs.
func (w *Watch) Start() { w.state.Store(0) }

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
	case peerClosed(fd):
		// Bytes for the driver to judge, but the server closed its side.
		return VGone, 0
	}
	return VData, 0
}

// Look makes one non-blocking look at the socket, for the lock's Check;
// with VGone, the errno is the socket's error, if any. An unwatched socket
// is VQuiet. While a statement has the socket, it reads only the TCP state
// (lookState): a peek would misread the statement's reply. Each look is
// its own, never answered from another's. It neither allocates nor blocks:
// only with all nSlots slots in use does it yield until one of those
// looks, a single system call, is done.
func (w *Watch) Look() (Verdict, syscall.Errno) {
	if w.rc == nil {
		return VQuiet, 0
	}
	if w.stream != nil && w.stream.ended.Load() {
		return VGone, 0 // the driver read the frame that ends the session
	}
	i := 0
	for {
		s := w.state.Load()
		if s&stBusy != 0 {
			return w.lookState()
		}
		free := ^s & slotBits
		if free == 0 {
			runtime.Gosched()
			continue
		}
		i = bits.TrailingZeros32(free)
		if w.state.CompareAndSwap(s, s|1<<i) {
			break
		}
	}
	sl := &w.slots[i]
	if sl.fn == nil { // this slot's first look: only its owner gets here
		sl.fn = func(fd uintptr) { sl.res, sl.err = w.lookAt(fd, sl.buf[:]) }
	}
	sl.res, sl.err = VQuiet, 0
	if err := w.rc.Control(sl.fn); err != nil {
		// Closed on this side (as pgx does after reading a FATAL): the
		// lock is gone, if not yet said; "quiet" would let Check say "held".
		sl.res = VGone
	}
	v, errno := sl.res, sl.err
	w.state.And(^(uint32(1) << i))
	return v, errno
}

// lookState is Look while a statement has the socket: the stream is the
// statement's, the TCP state is not. A server that sent its FIN (or a
// reset) has ended the session whatever the statement reads first, so a
// holder resumed with a keep-alive check in flight finds the loss at its
// first Check, before the check's goroutine runs: one getsockopt. On a
// Stream, a frame that ends the session ends it too, whether the driver
// has read it or it is queued behind the statement's reply: one peek,
// judged from where the driver's reads left off (see Stream).
func (w *Watch) lookState() (Verdict, syscall.Errno) {
	if !w.closed.Load() {
		if err := w.rc.Control(w.stateFn); err != nil {
			return VGone, 0 // closed on this side: see Look
		}
	}
	if w.closed.Load() {
		return VGone, 0
	}
	return VQuiet, 0
}

// Take takes the socket for a statement, as Pause does, looking at it on
// the way: Look skips a socket a statement has, so a Check would otherwise
// say "held" for as long as a statement to a server already gone took to
// fail (as at a resume after a pause longer than the keep-alive period).
// It looks first as one more looker, before the socket is busy, so that a
// concurrent Check looks too rather than skip it; then, the socket taken,
// once more, so that no statement follows a close that came in between.
// With VGone (and the socket's errno, if any) the caller must not send the
// statement and ends the lock as lost (Stop handles paused or not).
// Otherwise the socket is the caller's until Resume, as after Pause.
func (w *Watch) Take() (Verdict, syscall.Errno) {
	if v, errno := w.Look(); v == VGone {
		return v, errno
	}
	w.Pause()
	if w.rc == nil {
		return VQuiet, 0
	}
	w.take.res, w.take.err = VQuiet, 0
	if err := w.rc.Control(w.take.fn); err != nil {
		// Closed on this side: the statement fails, and says so better.
		return VQuiet, 0
	}
	return w.take.res, w.take.err // VData too: the statement reads those bytes
}

// Wait blocks until the socket is readable, deadline (if set) passes or
// the watch stops, sitting out pauses; EvGone comes with the socket's
// errno, if any. One goroutine may wait, on a watched socket.
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
		case w.stream != nil && w.stream.ended.Load():
			return EvGone, 0 // the driver read the frame that ends the session
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
		case w.wait.res == VGone:
			return EvGone, w.wait.err
		}
		return EvData, 0
	}
}

// Pause takes the socket from the watch for a statement: when it returns,
// no look runs and the waiter is out of rc.Read, with no read deadline
// left. Pauses never overlap: statements run one at a time. Before a
// statement on a held lock's connection, use Take, which also looks.
func (w *Watch) Pause() {
	w.busy()
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

// Resume gives the socket back to the watch.
func (w *Watch) Resume() {
	w.mu.Lock()
	w.paused = false
	stopped := w.stopped
	w.cond.Broadcast()
	w.mu.Unlock()
	if !stopped {
		w.state.And(^stBusy)
	}
}

// Stop ends the watch for good (Wait returns EvStopped, no look runs); the
// caller has paused it, or is about to close the socket.
func (w *Watch) Stop() {
	w.busy()
	w.mu.Lock()
	w.stopped = true
	if w.waiting {
		_ = w.raw.SetReadDeadline(longAgo)
	}
	w.cond.Broadcast()
	w.mu.Unlock()
}

// busy keeps new looks off and yields until those begun (a syscall) end.
func (w *Watch) busy() {
	w.state.Or(stBusy)
	for w.state.Load()&slotBits != 0 {
		runtime.Gosched()
	}
}
