//go:build !linux

package filelock

// Without inotify, waiters wake on releases in their process and backstops.

func watchRefLocked() bool          { return false }
func watchUnrefLocked() func()      { return nil }
func watchAddDirLocked(string) bool { return false }
func watchRemoveDirLocked(string)   {}

func watcherActive() bool { return false }
