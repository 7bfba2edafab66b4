//go:build linux

package sockwatch

import (
	"syscall"
	"unsafe"
)

// canPeek reports whether peek looks at sockets on this system.
const canPeek = true

// peek is recv(fd, buf, MSG_PEEK|MSG_DONTWAIT): it copies what the socket
// has to read into buf, leaving it there, and never blocks; n == 0 with
// no error is the end of the stream. It retries on EINTR, and makes the
// system call itself so as not to allocate (syscall.Recvfrom would decode
// a source address).
func peek(fd uintptr, buf []byte) (n int, errno syscall.Errno) {
	for {
		r, _, e := syscall.Syscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)),
			syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
		if e != syscall.EINTR {
			return int(r), e
		}
	}
}

// tcpEstablished is TCP_ESTABLISHED, tcp_info's tcpi_state while both are open.
const tcpEstablished = 1

// peerClosed reports whether the TCP connection on fd has left the
// ESTABLISHED state: the peer sent its FIN (CLOSE_WAIT) or a reset. It
// reads the first byte of the kernel's TCP_INFO, never the stream, so it
// may run while the driver uses the socket. A Unix socket says false.
func peerClosed(fd uintptr) bool {
	var state [1]byte
	n := uint32(len(state))
	_, _, e := syscall.Syscall6(syscall.SYS_GETSOCKOPT, fd, syscall.IPPROTO_TCP, syscall.TCP_INFO,
		uintptr(unsafe.Pointer(&state[0])), uintptr(unsafe.Pointer(&n)), 0)
	return e == 0 && n >= 1 && state[0] != tcpEstablished
}

// recv is read(fd, buf) on a non-blocking socket: EAGAIN when it has
// nothing to read, n == 0 with no error at the end of the stream. It
// retries on EINTR.
func recv(fd uintptr, buf []byte) (n int, errno syscall.Errno) {
	for {
		r, _, e := syscall.Syscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)))
		if e != syscall.EINTR {
			return int(r), e
		}
	}
}
