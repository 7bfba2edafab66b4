//go:build !linux

package sockwatch

import "syscall"

// canPeek is false: keep-alive pings alone check held locks' connections.
const canPeek = false

// peek is never called where canPeek is false.
func peek(fd uintptr, buf []byte) (int, syscall.Errno) { return 0, syscall.EAGAIN }

// peerClosed is never called where canPeek is false.
func peerClosed(fd uintptr) bool { return false }

// recv is never called where canPeek is false.
func recv(fd uintptr, buf []byte) (int, syscall.Errno) { return 0, syscall.EAGAIN }
