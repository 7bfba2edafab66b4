package main

import "syscall"

// childAttr returns the command's process attributes: a process group of
// its own, so that a lost lock stops the whole job, and SIGKILL if dlock
// itself dies (SIGKILL, a crash), since the lock ends with dlock: the
// kernel drops a file lock at once, other stores when the TTL runs out.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
