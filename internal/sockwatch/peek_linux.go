//go:build linux

package sockwatch

import (
	"syscall"
	"unsafe"
)

// canPeek reports whether peek looks at sockets on this system.
const canPeek = true

// peek is recv(fd, buf, MSG_PEEK|MSG_DONTWAIT): it copies what the socket
// has to read into buf without taking it off the socket, and never
// blocks. n == 0 with no error is the end of the stream: the peer closed
// the connection. It retries on EINTR, and makes the system call directly
// (syscall.Recvfrom would decode a source address nobody needs) so that
// it does not allocate.
func peek(fd uintptr, buf []byte) (n int, errno syscall.Errno) {
	for {
		r, _, e := syscall.Syscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)),
			syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
		if e != syscall.EINTR {
			return int(r), e
		}
	}
}
