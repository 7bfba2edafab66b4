package sockwatch

import (
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
)

// Framing is a protocol's framing, for a Stream: each frame starts with
// Header bytes that give its length.
type Framing struct {
	Header int                 // bytes at a frame's start that give its length (≤ 8)
	Len    func(h []byte) int  // the frame's length, header included, from its first Header bytes
	Judge  int                 // bytes at a frame's start that Ends judges (Header ≤ Judge ≤ 8)
	Ends   func(h []byte) bool // true for a frame the server sends as it ends the session; it gets the first min(Judge, length) bytes
}

// frames follows a stream through its frames (see Framing).
type frames struct {
	head  [8]byte
	hn    int // bytes of head collected
	total int // the current frame's length, once its header is in (0: not yet)
	rest  int // bytes of the current frame past its judged head, still to come
}

// scan follows b, the stream's next bytes, and reports whether a frame
// that ends the session begins in it (or began in bytes before, its head
// completed in b).
func (fs *frames) scan(b []byte, f *Framing) (ended bool) {
	for len(b) > 0 {
		if fs.rest > 0 {
			k := min(fs.rest, len(b))
			fs.rest -= k
			b = b[k:]
			continue
		}
		want := f.Header
		if fs.total > 0 {
			want = min(f.Judge, fs.total)
		}
		k := min(want-fs.hn, len(b))
		copy(fs.head[fs.hn:], b[:k])
		fs.hn += k
		b = b[k:]
		if fs.hn < want {
			return ended // the head continues in the next bytes
		}
		if fs.total == 0 {
			// A length shorter than the header is not the protocol's (a
			// TLS stream, which the watch does not judge): the frame is
			// taken to be its header alone.
			fs.total = max(f.Len(fs.head[:f.Header]), f.Header)
			if min(f.Judge, fs.total) > fs.hn {
				continue // collect the rest of the judged head
			}
		}
		j := min(f.Judge, fs.total)
		if f.Ends(fs.head[:j]) {
			ended = true
		}
		fs.rest, fs.total, fs.hn = fs.total-j, 0, 0
	}
	return ended
}

// A Stream is a connection whose reads the driver makes through it, so
// that a Watch of it knows where the protocol's frames begin: a frame
// that ends the session is seen as the driver reads it, before the
// driver parses it, and a look while a statement runs judges every frame
// still queued in the socket, not only the first (see Follow).
type Stream struct {
	net.Conn
	rc syscall.RawConn
	f  Framing

	// mu makes a read (the system call and the scan of its bytes) and a
	// look at the queued bytes one after the other, so that the look
	// starts its scan where the driver's reads left off.
	mu sync.Mutex
	fs frames // where the driver's reads left off; guarded by mu
	// A look's copy of fs, and the bytes it peeks, guarded by mu.
	lfs frames
	buf [512]byte
	// ended is set for good once the driver read a frame that ends the
	// session.
	ended atomic.Bool

	// Read's buffer and results, for readFn: one Read at a time.
	p      []byte
	n      int
	errno  syscall.Errno
	readFn func(fd uintptr) bool
}

// Follow returns c as a Stream of framing f, for the driver to read
// from and for New to watch; c itself where sockets cannot be watched.
// The stream is followed from its first byte, so the driver must not have
// read from c before. Under TLS, whose records are not the protocol's
// frames, the watch (opaque) ignores what the Stream finds.
func Follow(c net.Conn, f Framing) net.Conn {
	rc := rawConn(c)
	if rc == nil {
		return c
	}
	s := &Stream{Conn: c, rc: rc, f: f}
	s.readFn = func(fd uintptr) bool {
		s.mu.Lock()
		n, errno := recv(fd, s.p)
		if errno == syscall.EAGAIN || errno == syscall.EWOULDBLOCK {
			s.mu.Unlock()
			return false // wait for the socket to become readable
		}
		if n > 0 && s.fs.scan(s.p[:n], &s.f) {
			s.ended.Store(true)
		}
		s.mu.Unlock()
		s.n, s.errno = n, errno
		return true
	}
	return s
}

// Read reads as c's Read does, following the frames read.
func (s *Stream) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	s.p, s.n, s.errno = p, 0, 0
	err := s.rc.Read(s.readFn)
	s.p = nil
	switch {
	case err != nil: // a deadline, or closed
		return 0, err
	case s.errno != 0:
		return 0, &net.OpError{Op: "read", Net: s.LocalAddr().Network(), Source: s.LocalAddr(), Addr: s.RemoteAddr(), Err: os.NewSyscallError("read", s.errno)}
	case s.n == 0:
		return 0, io.EOF
	}
	return s.n, nil
}

// SyscallConn returns c's, for the watch's looks.
func (s *Stream) SyscallConn() (syscall.RawConn, error) { return s.rc, nil }

// queuedEnd reports whether the driver has read a frame that ends the
// session, or one is queued in the socket fd among its first len(buf)
// bytes, judged from where the driver's reads left off.
func (s *Stream) queuedEnd(fd uintptr) bool {
	if s.ended.Load() {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lfs = s.fs
	n, errno := peek(fd, s.buf[:])
	return errno == 0 && n > 0 && s.lfs.scan(s.buf[:n], &s.f)
}

// rawConn returns c's syscall.RawConn where this system can peek at it,
// else nil.
func rawConn(c net.Conn) syscall.RawConn {
	sc, ok := c.(syscall.Conn)
	if !canPeek || !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return rc
}
