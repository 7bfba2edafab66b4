// Package filelock is dlock's local backend (scheme file://): each lock is
// a flock(2) on a file in one directory, so it excludes processes on one
// host, and goroutines within one process. It needs no server, and a lock
// is free the moment its holder's process dies: the kernel drops the flock.
//
// Import the package for its side effect and open a URL:
//
//	import _ "github.com/dlockgo/dlock/filelock"
//
//	locker, err := dlock.Open(ctx, "file:///var/lock/myapp")
//
// In code:
//
//	locker, err := filelock.New("/var/lock/myapp", &filelock.Options{Mode: 0o660})
//
// # URL
//
//	file://                       the per-user default directory (DefaultDir)
//	file:///var/lock/myapp        the directory /var/lock/myapp, created (0700) if missing
//	file:///var/lock/myapp?mode=0660&sync=true
//
// The path is the lock directory, absolute; the host is empty or
// localhost. DefaultDir is the first of $XDG_STATE_HOME/dlock (if that is
// absolute), $HOME/.local/state/dlock, os.UserCacheDir()/dlock and
// os.TempDir()/dlock-<uid>; it is per user, so different users do not
// exclude each other through it: give them a shared directory and
// mode=0660. Parameters, besides dlock's shared ttl (30s by default; see
// Lifetime and loss in docs/FILE.md) and renew:
//
//	mode=0600   permission of the lock files the driver creates (Options.Mode);
//	            octal, must include 0600; applied exactly, whatever the umask
//	sync=false  fsync each lock file after writing its new token (Options.Sync)
//
// An unknown parameter, a host other than localhost (file://var/lock, with
// two slashes, is the usual slip), a relative path (file:dir), a user, or
// file:/// is a *dlock.ParamError naming it.
//
// # Guarantees
//
// The lock "orders/42" is the file orders%42.lock in the directory (see
// FileName and LockName); lock files are never deleted. A file holds the
// last fencing token granted for its lock; each acquisition writes the
// later of that token + 1 and the wall clock in microseconds, so tokens
// strictly increase as long as the clock has not been set back. A flock
// has no TTL: it is held until released or its holder's process ends; a
// renewal checks that the lock file was not removed or replaced, the one
// way to lose a flock. A waiting Acquire can be cancelled and leaves
// nothing queued; waiters are not served in order. util-linux flock(1) on
// the same file excludes dlock and is excluded by it. The driver
// implements driver.Moder for the readers-writer lock, with writer
// preference across processes (files name + RWSuffix, GateSuffix and
// SeqSuffix); semaphores and elections are unsupported. One host only:
// network file systems are not supported. Without flock (Windows)
// NewDriver returns an error matching dlock.ErrUnsupported.
//
// # Securing the store
//
// The store is the directory, and its guard the file system's permissions:
// whoever may write the lock files (or the directory) can take or break
// the locks. The driver creates a missing directory 0700 and its lock
// files with Options.Mode, so only the user's own processes share its
// locks; for several users, give them a group and a directory of that
// group, with mode=0660 for the files. DefaultDir is refused if it is a
// symbolic link, belongs to another user, or is writable by group or
// others.
//
// See https://github.com/dlockgo/dlock/blob/main/docs/FILE.md for file
// names, acquiring and waiting, the readers-writer lock's gate, lifetime
// and loss, the limits and the measurements.
package filelock
