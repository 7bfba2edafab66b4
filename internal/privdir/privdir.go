//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

// Package privdir checks that a directory is the current user's own: a
// directory where another user could create or replace files would let
// that user break what lives there (lock files, a holder's socket).
package privdir

import (
	"fmt"
	"os"
	"syscall"
)

// Check makes sure dir is a directory (not a link to one), owned by the
// current user, with none of the permission bits of closed set (for
// example 0o022: writable by group or others; 0o077: open to them at all).
func Check(dir string, closed os.FileMode) error {
	var st syscall.Stat_t
	if err := syscall.Lstat(dir, &st); err != nil {
		return &os.PathError{Op: "lstat", Path: dir, Err: err}
	}
	switch {
	case st.Mode&syscall.S_IFMT != syscall.S_IFDIR:
		return fmt.Errorf("%s is not a directory", dir)
	case int(st.Uid) != os.Getuid():
		return fmt.Errorf("%s is owned by uid %d, not by the current user (uid %d)", dir, st.Uid, os.Getuid())
	case os.FileMode(st.Mode)&closed != 0:
		return fmt.Errorf("%s is open to group or others beyond %#o (mode %#o)", dir, 0o777&^closed, st.Mode&0o777)
	}
	return nil
}
