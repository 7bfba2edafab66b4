// Package filelock is dlock's local backend (scheme file://): each lock is
// a flock(2) on a file in one directory, so it excludes processes on one
// host, and goroutines within one process. It needs no server, and a lock
// is free the moment its holder's process dies: the kernel drops the flock.
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
// a *dlock.ParamError naming it. In code: New(dir, &Options{...}, ...).
//
// # Files
//
// The lock "orders/42" is the file orders%42.lock in the directory (see
// FileName): "/" becomes "%", which lock names cannot contain, so the
// mapping is reversible (LockName), collision-free and flat — no name can
// reach outside the directory. Files are created on first use, opened
// without following symbolic links, and never deleted: deleting a lock
// file while another process has it open would let two processes lock two
// different files under one name. After each flock the driver checks that
// the path still names the locked file, and starts over if it does not.
//
// A file holds the last fencing token granted for its lock, as decimal
// text. Each acquisition writes the later of that token + 1 and the wall
// clock in microseconds, so tokens strictly increase while the file
// exists, and also across its deletion or a machine crash that loses the
// write (unless Options.Sync), as long as the clock has not been set back.
//
// Other programs can share the locks: util-linux flock(1) on the same
// file excludes dlock and is excluded by it.
//
// # Lifetime and loss
//
// A flock has no TTL: it is held until released or until its holder's
// process ends. The Locker still keeps a TTL for the lease: it renews
// every TTL/3, and a renewal checks that the lock file was not removed or
// replaced — the one way a flock can be lost — and reports the lease lost
// if it was. With renew=false the Locker ends the lease at its TTL and the
// driver releases the flock. A holder that is paused (SIGSTOP, a debugger)
// keeps its lock; no other process gets it meanwhile.
//
// # Waiting
//
// A waiting Acquire never blocks in flock(2), which cannot be cancelled.
// It retries a non-blocking flock when a lock of its process is released
// or when the kernel (inotify, on Linux) reports the lock file closed,
// removed or replaced, with a backstop timer for releases no event
// announces. A cancelled wait returns at once and leaves nothing queued.
// Waiters are not served in order: each release wakes them all, and the
// first to try wins. Within one process, an Acquire does not overtake a
// waiter that has already waited a millisecond, so a client that releases
// and at once acquires again cannot starve the others; across processes
// nothing prevents that.
//
// # Readers-writer locks
//
// The driver implements driver.Moder for the readers-writer lock
// (Locker.AcquireRead, AcquireWrite and their Try forms); semaphores and
// elections are unsupported. The readers-writer lock called name has
// files of its own, never a mutex's: name + RWSuffix (".rwlock"), on
// which readers hold a shared flock and a writer an exclusive one;
// name + GateSuffix (".rwgate"), the writers' gate; and name + SeqSuffix
// (".rwseq"), the token file.
//
// flock has no queue, so writer preference is built on the gate: a
// writer that waits holds the gate exclusively (before and while it waits
// for the lock, until it has it), and a reader takes the gate shared,
// without blocking, for the instant between checking it and taking the
// lock. So, across processes as within one, once a writer waits no reader
// gets in until that writer has had the lock, and TryAcquireRead fails
// while a writer waits; readers queued behind it all get in together when
// it leaves (unless another writer is in the gate by then). Writers are
// not ordered among themselves, and a stream of writers can keep readers
// out. Waits are woken as for the mutex (releases in the process, the
// kernel watcher's close events on the gate and the lock file, the
// backstop); a writer finding the gate held shared — readers passing it —
// tries again after 100µs.
//
// Every grant, read or write, advances the token in the token file under
// an exclusive flock held for one read and one write, tried without
// blocking and again after a pause of 20µs doubling to 1ms until ctx
// ends; so concurrent readers get distinct, increasing tokens.
//
// # Securing the store
//
// The store is the directory, and its guard the file system's
// permissions: whoever may write the lock files (or the directory) can
// take or break the locks. The driver creates a missing directory 0700
// and its lock files with Options.Mode (0600 by default, at least owner
// read and write), so only the user's own processes share its locks; for
// several users, give them a group and a directory of that group with a
// mode such as 0660 for the files. The default directory (file://) must
// be the current user's own and not writable by group or others, or
// opening fails saying which.
//
// # Limits
//
// One host only. Network file systems are not supported: flock on NFS is
// emulated with byte-range locks or local only, and inotify does not see
// other clients. The default directory is per user; users who must
// exclude each other need a shared directory and a mode such as 0660. On
// platforms without flock (Windows) NewDriver returns an error matching
// dlock.ErrUnsupported.
package filelock
