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
// In code: New(dir, &Options{...}, ...).
//
// # URL
//
//	file://                       the per-user default directory (DefaultDir)
//	file:///var/lock/myapp        the directory /var/lock/myapp, created (0700) if missing
//	file:///var/lock/myapp?mode=0660&sync=true
//
// Parameters, besides dlock's shared ttl and renew:
//
//	mode=0600   permission of the lock files the driver creates (Options.Mode);
//	            octal, must include 0600; applied exactly, whatever the umask
//	sync=false  fsync each lock file after writing its new token (Options.Sync)
//
// An unknown parameter, a host other than localhost, or a relative path is
// a *dlock.ParamError naming it.
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
// See https://github.com/dlockgo/dlock/blob/main/docs/FILE.md for the
// default directory, file names, waiting, the readers-writer lock's gate,
// lifetime and loss, security, the limits and the measurements.
package filelock
