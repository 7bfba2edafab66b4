//go:build !linux

package filelock

// Without inotify, waiters are woken by releases in their own process and
// otherwise retry on the backstop timer.

func watchRefLocked() bool          { return false }
func watchUnrefLocked() func()      { return nil }
func watchAddDirLocked(string) bool { return false }
func watchRemoveDirLocked(string)   {}

func watcherActive() bool { return false }
