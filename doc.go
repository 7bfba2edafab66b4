// Package dlock is distributed locking for Go: one API over many backends
// (Redis, Redlock, ZooKeeper, etcd, PostgreSQL, MySQL, NATS JetStream, a
// local file, memory), with fencing tokens, automatic renewal and a loss
// signal on every one.
//
// # Use
//
//	locker, err := dlock.Open(ctx, "redis://127.0.0.1:6379")
//	...
//	defer locker.Close()
//
//	lease, err := locker.Acquire(ctx, "orders/42") // waits; ctx bounds the wait
//	if err != nil { ... }
//	defer lease.Release(ctx)
//
//	work, cancel := lease.Context(ctx) // cancelled the moment the lock is lost
//	defer cancel()
//	err = process(work, lease.Token())  // pass the fencing token to the resource
//
// TryAcquire makes one attempt and returns an error matching ErrNotAcquired
// when another owner holds the lock.
//
// # Kinds of lock
//
// Besides the mutex, a Locker offers the kinds of lock its backend can do
// well (Locker.Supports tells; the others fail with ErrUnsupported):
//
//	AcquireRead, AcquireWrite    readers-writer lock: many readers or one writer;
//	                             a waiting writer holds back later readers
//	AcquirePermit(name, n)       semaphore: at most n holders
//	Campaign, Leader, Observe    leader election: lead, read and follow the leader
//	AcquireAll(names)            multi-lock over any backend: a set of mutexes,
//	                             all or nothing, in one order (no deadlock)
//
// Each has a Try form that makes one attempt and fails with ErrNotAcquired
// instead of waiting (TryAcquireRead, TryAcquireWrite, TryAcquirePermit,
// TryCampaign, TryAcquireAll). Every kind returns a *Lease
// (a *MultiLease for AcquireAll) with the same renewal, loss signal and
// fencing token as a mutex's. Each kind has names of its own: the mutex
// "x" and the readers-writer lock "x" are unrelated locks.
//
// # Guarantees
//
// A lease is renewed about every TTL/3 (DefaultTTL is 30s) while held.
// Lease.Err decides at the call: it returns nil only while the lock's
// conservative validity has not ended (its TTL, or the session's) and the
// backend does not already know the lock gone, so a holder whose lock
// expired while it was paused gets ErrLost at its first look, before the
// store can give the lock to anyone else. Done closes when the lease's
// supervision notices the end: use it for waking, and Err, right before
// each write, for checking. A store that takes a lock away on its own (a
// deleted Redis key, a killed database session) can hand it on before the
// holder's next look; docs/GUARANTEES.md gives that window per backend.
// Release and renewal are owner-checked: a client never releases a lock
// it does not hold.
//
// A lock with a TTL cannot stop a holder that was paused (GC, SIGSTOP) or
// cut off from touching the resource after its lock expired. The remedy is
// the fencing token: Lease.Token strictly increases with each acquisition
// of a name, so the resource can reject a write carrying a token lower than
// one it has already seen.
//
// # Holding across processes
//
// A lock can outlive the process that took it, on a backend whose locks
// are keys with a TTL (redis, redlock, nats; mem within one process): Lease.Detach stops renewing it
// here and returns its Handle, whose text (Handle.String) another process
// decodes with ParseHandle and takes over with Locker.Resume, getting a
// supervised lease with the same token, or releases with
// Locker.ReleaseHandle. A handle whose lock expired or passed to another
// owner is refused with ErrNotHeld, and nothing changes on the store.
// WithMaxHold caps how long a lease is held, across such hand-overs too:
// a stuck holder cannot keep a lock for ever by renewing it. The CLI's
// dlock acquire, renew and release are built on these, and on the other
// backends keep the lock in a holder process of their own (docs/CLI.md).
//
// # Errors
//
// The errors a caller tells apart, with errors.Is; dlock wraps them with
// the lock's name and the backend's cause. Any other error (a store that
// cannot be reached, a request that failed) carries the backend's own.
//
//	ErrNotAcquired   TryAcquire (and the other Try forms): another owner holds
//	                 the lock; often a *HeldError saying for how long
//	ErrLost          Lease.Err after the lock was lost: expired unrenewed, its
//	                 session or connection ended, or the store took it away
//	ErrMaxHold       Lease.Err, with ErrLost, once WithMaxHold ran out; Resume
//	                 past a handle's deadline
//	ErrReleased      Lease.Err after Release (or Close of the Locker)
//	ErrDetached      Lease.Err, with ErrReleased, after Detach
//	ErrNotHeld       Renew, Release, Detach, Resume, ReleaseHandle: this owner
//	                 does not hold the lock (it also matches how the lease ended)
//	ErrInvalidName   a name that breaks ValidateName
//	ErrUnsupported   a kind of lock, or handles (Detach, Resume), the backend lacks
//	ErrClosed        a call on a closed Locker
//	ErrNoQuorum      Redlock: too few nodes answered in time to decide
//	ErrBadHandle     ParseHandle of text that is not a handle; Resume or
//	                 ReleaseHandle of another backend's handle
//
// A bad URL parameter is a *ParamError naming it.
//
// # Backends
//
// Each backend is a package that registers a URL scheme: memlock (mem://),
// redislock (redis://), redlock (redlock://), zklock (zk://), etcdlock
// (etcd://), pglock (postgres://), mysqllock (mysql://), natslock
// (nats://) and filelock (file://). Import it, for its side effect alone if you only use Open.
// Backends whose locks live as long as a session or connection (ZooKeeper,
// etcd, PostgreSQL, MySQL) keep it alive themselves and signal its loss;
// the others are renewed by the Locker. A file lock is held while the
// process lives: the kernel frees it when the process dies.
//
// # Metrics and logs
//
// With WithMeterProvider, a Locker records OpenTelemetry metrics
// (dlock.acquire.duration, dlock.acquisitions, dlock.hold.duration,
// dlock.renewals, dlock.lost, dlock.held), with the attribute "backend"
// (lock names are never attributes: they are unbounded). With WithLogger,
// it logs acquisitions and releases at Debug, failed acquisitions and
// renewals at Warn, and lost leases at Error, with the lock's name and
// token. Each metric's unit and attributes, and the log records, are in
// https://github.com/dlockgo/dlock/blob/main/docs/OBSERVABILITY.md.
package dlock
