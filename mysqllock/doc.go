// Package mysqllock is dlock's MySQL and MariaDB backend (scheme
// mysql://), on github.com/go-sql-driver/mysql. A lock is a user-level
// lock of the server (GET_LOCK), held on one of the driver's sessions:
// connections that hold up to Options.SessionLocks locks each.
//
// # URL
//
//	mysql://user:password@host:port/database?table=dlock_tokens&keepalive=1s
//
// for example
//
//	mysql://app:secret@10.0.0.5:3306/app?prefix=app:&ttl=10s&tls=true
//
// The host defaults to 127.0.0.1 and the port to 3306; the path names the
// database of the token table. Parameters:
//
//	table      the table of fencing-token counters, table or database.table
//	           (Options.Table, default DefaultTable)
//	prefix     the prefix of server-side lock names (Options.Prefix, default
//	           DefaultPrefix; "prefix=" for none)
//	keepalive  how often each session is checked (Options.KeepAlive,
//	           default DefaultKeepAlive); above zero
//	session_locks  the most locks one session holds (Options.SessionLocks,
//	           default DefaultSessionLocks, 256); at least 1
//	wait_step  the longest single server-side wait (Options.WaitStep,
//	           default DefaultWaitStep, lowered below readTimeout); ≥ 1s
//	socket     a Unix socket to connect to instead of host:port
//
// These go-sql-driver DSN parameters pass through, under the same names,
// with go-sql-driver's meaning: timeout, readTimeout, writeTimeout, tls,
// charset, collation, compress, connectionAttributes, maxAllowedPacket,
// serverPubKey, checkConnLiveness, rejectReadOnly, allowCleartextPasswords,
// allowFallbackToPlaintext, allowNativePasswords, allowOldPasswords. dlock's
// shared ones, ttl and renew, are accepted too (renew has no effect). Any
// other parameter is a *dlock.ParamError naming it: go-sql-driver would
// send an unknown one to the server as a SET, and the parameters that
// change how statements behave (multiStatements, interpolateParams,
// parseTime, allowAllFiles...) have no use here. For anything else, build
// a *sql.DB yourself and use New.
//
// TLS with a CA or a client certificate of your own takes files, which
// go-sql-driver's tls parameter cannot (it names only configurations
// registered in code), so mysqllock reads these itself, as every dlock
// backend does:
//
//	cacert     PEM file of the authorities to trust (default the system's)
//	cert, key  PEM files of the client's certificate and key (REQUIRE X509)
//	server_name           the name the server's certificate must carry
//	insecure_skip_verify  accept any certificate: for tests only
//
//	mysql://locks:password@10.0.0.5:3306/locks?cacert=/etc/dlock/ca.pem&cert=/etc/dlock/client.pem&key=/etc/dlock/client-key.pem
//
// With any of them, tls may be true or left out. The files are read when
// the URL is opened; a missing or unreadable one is a *dlock.ParamError
// naming its parameter.
//
// # Securing the store
//
// The least a user needs is every privilege on the token table's database
// (or, with the table made beforehand, SELECT, INSERT and UPDATE on it):
// GET_LOCK and RELEASE_LOCK need none. TestSecured runs the conformance
// suite as such a user, created REQUIRE X509, on a MariaDB with
// require_secure_transport, and checks that a wrong password, a wrong CA, a
// missing client certificate and a plain connection each fail Open with an
// error naming the cause and no password.
//
// A driver opened from a URL owns its *sql.DB (Close closes it), keeps up
// to OpenMaxIdleConns idle connections, and treats the pool as exclusive
// (see Options.ExclusivePool).
//
// # How a lock works
//
// GET_LOCK locks belong to the connection that took them: GET_LOCK and
// RELEASE_LOCK must run on the same connection, which no other code may
// get from the pool meanwhile. (Locking through the pooled *sql.DB, as
// some libraries do, runs the release on whatever connection the pool
// hands out, and leaves the lock held by an idle pooled connection.) So
// the driver checks connections out of the *sql.DB (*sql.Conn) as
// sessions, and keeps each as long as it holds locks: up to
// Options.SessionLocks of them (256 by default), all taken with the same
// TTL, since the TTL is the connection's wait_timeout (see Loss). A
// driver holding n locks of one TTL uses about n/256 connections, more
// while acquisitions run side by side (up to 16 sessions before they wait
// for one another's statements). A session left holding nothing goes back
// to the pool. GET_LOCK is re-entrant within a connection, so a session
// is never asked for a name it holds: another session is, or a new one.
//
// The statements, each one round trip:
//
//	SET @dlock_wait_timeout = @@SESSION.wait_timeout, SESSION wait_timeout = <TTL>  (new session, caller's pool only)
//	SELECT GET_LOCK('<key>', 0), CONNECTION_ID(), @@SESSION.wait_timeout           (new session; on a session: SELECT GET_LOCK('<key>', 0))
//	INSERT INTO <table> ... ON DUPLICATE KEY UPDATE token = LAST_INSERT_ID(token + 1)
//	...
//	SELECT RELEASE_LOCK('<key>')
//	SET SESSION wait_timeout = <saved>                                            (session left empty, caller's pool only)
//
// A connection runs one statement at a time: a session's statements queue
// for it, each caller waiting at most until its context ends. A statement
// on a session is never cancelled with a caller's context, because
// go-sql-driver closes a connection whose statement's context ends, and
// every lock of the session would go with it: it is bounded instead by
// four keep-alive periods (at least four seconds), through the socket's
// deadline when the driver knows the socket (see Options.Sockets), else a
// context of its own; past that the session counts as lost. Release and
// Refresh return at their context's end, the statement going on. Names
// are sent as SQL literals (they are validated; see dlock.ValidateName),
// so no statement needs a server-side prepare whatever the DSN's
// interpolateParams.
//
// TryAcquire on a held lock gets 0 from GET_LOCK and returns a
// *dlock.HeldError (Remaining is 0: a lock has no expiry).
//
// # Names
//
// GET_LOCK names are global to the server (not per database), at most
// MaxLockNameLen (64) characters on MySQL 5.7 and later, and servers
// differ on case: MariaDB's manual says names are compared without regard
// to case, while MariaDB 10.11 in the tests treats "Ab" and "ab" as two
// locks. dlock's names are case-sensitive, so a lock called name is the
// server-side lock prefix+name with each upper-case letter written as '^'
// and its lower-case form, which means the same on either kind of
// server: "Orders/42" is "dlock:^orders/42". When that is longer than 64
// characters, the lock is prefix, '#' and the hex SHA-256 of the name, cut
// to 64 characters (57 hex digits, 228 bits, with the default prefix). Names hold neither '^' nor '#', so the readable and hashed
// forms never meet, and distinct names are distinct locks on either
// server (a hash collision aside). Driver.LockName tells the server-side
// name, to find a lock in SHOW PROCESSLIST or with IS_USED_LOCK.
//
// # Waiting
//
// Acquire first tries the lock on a session, as TryAcquire does. When
// another connection holds it, Acquire waits on the server, on a
// connection of its own: GET_LOCK('<key>', WaitStep), issued again each
// time a step times out; once granted, that connection becomes a session
// holding the lock, which later acquisitions of the same TTL may share. (A
// negative timeout, which MySQL takes for "forever", makes MariaDB 10.11
// return NULL at once.) When
// the context ends, the driver ends the wait with KILL QUERY <connection
// id> from another connection of the pool, so that nothing stays queued
// on the server when Acquire returns, then discards the waiting
// connection. It does not rely on go-sql-driver's handling of the context,
// which closes the connection: the server keeps such a dead wait queued
// until it notices (about a second on MariaDB 10.11), and would grant it
// the lock if it were released meanwhile. If the KILL cannot be sent
// within a second (the pool is at SetMaxOpenConns) or the wait has not
// ended a second after it, the driver closes the connection after all.
// Close ends waits the same way, with dlock.ErrClosed.
//
// Of a driver's Acquire calls waiting for one name, one at a time waits
// on the server, on a connection; the others queue in the process, in
// order of arrival, with no connection, and each one starts its own
// server-side wait when the one before it has the lock or gave up. A
// queued Acquire whose context ends leaves the queue at once, with the
// context's error (dlock.ErrClosed after Close). So a thousand goroutines
// waiting on one name through one driver cost one waiting connection, and
// SHOW PROCESSLIST (or Inspect's Waiters) shows one waiter per driver, not
// per goroutine. Drivers, and processes, still queue on the server.
//
// # Fencing token
//
// Once GET_LOCK has granted the lock, the same session advances the
// name's counter in the token table, one row per name:
//
//	INSERT INTO dlock_tokens (name, token)
//	VALUES ('<name>', LAST_INSERT_ID(UNIX_TIMESTAMP() * 1000000 + MICROSECOND(NOW(6))))
//	ON DUPLICATE KEY UPDATE token = LAST_INSERT_ID(token + 1)
//
// and reads the new value from the statement's OK packet (the insert id),
// in the same round trip. Only the holder writes the row, so tokens
// strictly increase per name. A new row starts from the server's clock in
// microseconds: a row deleted (to prune names no longer used) or a table
// dropped continues above every token it gave before, unless the name was
// taken more than once per microsecond on average, or the server's clock
// went back. The table is InnoDB: a token is durable once acquired (with
// innodb_flush_log_at_trx_commit=1, the default). The driver creates the
// table the first time it finds it missing; see Driver.Migrate to create
// it ahead of time.
//
// # Loss
//
// A lock lives as long as its session. Lease.Expires is the zero time,
// the lock is not renewed, and WithAutoRenew(false) changes nothing. The
// driver checks each session every keep-alive period (DefaultKeepAlive,
// or a third of the TTL if shorter): SELECT CONNECTION_ID() must still
// answer the session's id (a proxy that reconnected it would not), and
// Refresh checks one lock at once (IS_USED_LOCK of its key must be the
// session's id). A failed check (the connection was killed or dropped,
// the server restarted) ends the session with every lock on it: each
// lease's Done closes and its Err matches dlock.ErrLost. The driver then
// closes the connection, so that the server frees the locks if it still
// had them. Options.SessionLocks bounds how many locks one such loss
// takes; 1 gives each lock a connection of its own.
//
// The TTL bounds how long a silent holder keeps a lock: a session's
// wait_timeout is its locks' TTL rounded up to whole seconds (at least
// 1s), set before its first lock can be granted, so a holder whose host
// dies without closing its connections, or that is cut off, loses the
// lock after the TTL rather than after the server's default of 8 hours.
// The keep-alive checks keep a live holder's connection busy, and a check
// must be answered before the wait_timeout, counted from the sending of
// the last statement that succeeded on the session, less a tenth:
// otherwise the session is lost first, so a cut-off holder learns of the
// loss before the server can give the lock to anyone else.
//
// A holder whose connection is killed (KILL, an operator, a server
// restart) loses its locks at once on the server. A driver opened from a
// URL dials its pool's connections itself (mysql.Config.DialFunc) and
// knows each one's socket by the connection id of its handshake: while no
// statement runs on a session's connection, its keeper goroutine waits
// for the socket to become readable, peeking (MSG_PEEK, never reading):
// the end of the stream, a socket error or an error packet ends the
// session's leases within about a round trip; other bytes (TLS,
// compression) trigger a check at once. Grant.Check, which Lease.Err calls, makes one non-blocking peek at
// the idle socket (while a statement runs, a look at the connection's TCP
// state instead, and no statement starts before a peek found the server
// still there), so a holder resumed after
// a pause sees the close at its first Err. A driver on the caller's *sql.DB
// sees the sockets only when the pool's mysql.Config went through
// WatchSockets and its result is Options.Sockets; otherwise it learns of a
// kill at its next check. The peek is Linux only. Between the
// server freeing the lock and the holder's next look, nothing can make the
// holder safe: check Err right before each write, and pass the fencing
// token to the resource.
//
// # Pools
//
// The driver's sessions are connections of the *sql.DB: one per
// SessionLocks held locks of a TTL, up to 16 while acquisitions run side
// by side, and one per name the driver is waiting for on the server (one
// waiter per name, see Waiting); cancelling a wait takes one more for a
// moment. Size SetMaxOpenConns and SetMaxIdleConns for that (database/sql
// keeps only 2 idle connections by default), and the server's
// max_connections for every client's: past it, an acquisition fails with
// "Error 1040: Too many connections". A process can hold about
// max_connections × SessionLocks locks; docs/MYSQL.md has what dlock
// bench --scale measured. SetConnMaxLifetime and SetConnMaxIdleTime never
// close a connection that holds a lock: database/sql closes only
// connections back in the pool.
//
// On the caller's pool, a new session saves the connection's wait_timeout
// and restores it before the connection goes back: two statements more.
// A pool that serves the driver alone can skip them (Options.ExclusivePool,
// as a driver opened from a URL does).
//
// # Limits
//
// User-level locks live in one server's memory: they are not replicated,
// and Galera or group replication do not make them cluster-wide. Every
// client must reach the same primary. A failover ends every lock (the
// connections die), and with asynchronous replication the new primary's
// token table may lag, so that tokens go back: a fencing guard then
// refuses the new holders' writes until the counters pass the old ones.
// Connection poolers must keep a client's session on one server connection
// (ProxySQL stops multiplexing a session that calls GET_LOCK).
package mysqllock
