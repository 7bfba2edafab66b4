//go:build !linux

package main

import "syscall"

// childAttr returns the command's process attributes: a process group of
// its own, so that a lost lock stops the whole job. (Only Linux can also
// have the command killed when dlock dies.)
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
