// Package mysqllock is dlock's MySQL and MariaDB backend (scheme
// mysql://), on github.com/go-sql-driver/mysql. A lock is a user-level
// lock of the server (GET_LOCK), held on one of the driver's sessions:
// connections that hold up to Options.SessionLocks locks each. Its fencing
// token comes from a table of counters the driver keeps.
//
// Import the package for its side effect and open a URL:
//
//	import _ "github.com/dlockgo/dlock/mysqllock"
//
//	locker, err := dlock.Open(ctx, "mysql://app:secret@10.0.0.5:3306/app?prefix=app:&ttl=10s")
//
// On a *sql.DB of your own, use New or NewDriver with Options.
//
// # URL
//
//	mysql://user:password@host:port/database?param=value&...
//
// The host defaults to 127.0.0.1 and the port to 3306; the path names the
// database of the token table. Parameters:
//
//	table          the token table, table or database.table (Options.Table,
//	               default DefaultTable)
//	prefix         the prefix of server-side lock names (Options.Prefix,
//	               default DefaultPrefix; "prefix=" for none)
//	keepalive      how often each session is checked (Options.KeepAlive,
//	               default DefaultKeepAlive); above zero
//	session_locks  the most locks one session holds (Options.SessionLocks,
//	               default DefaultSessionLocks, 256); at least 1
//	wait_step      the longest single server-side wait (Options.WaitStep,
//	               default DefaultWaitStep, lowered below readTimeout); ≥ 1s
//	socket         a Unix socket to connect to instead of host:port
//	cacert         PEM file of the authorities to trust (default the system's)
//	cert, key      PEM files of the client's certificate and key
//	server_name           the name the server's certificate must carry
//	insecure_skip_verify  accept any certificate: for tests only
//
// These go-sql-driver DSN parameters pass through with go-sql-driver's
// meaning: timeout, readTimeout, writeTimeout, tls, charset, collation,
// compress, connectionAttributes, maxAllowedPacket, serverPubKey,
// checkConnLiveness, rejectReadOnly, allowCleartextPasswords,
// allowFallbackToPlaintext, allowNativePasswords, allowOldPasswords.
// dlock's shared ttl and renew are accepted too (renew has no effect). Any
// other parameter is a *dlock.ParamError naming it; for anything else,
// build a *sql.DB yourself and use New. A driver opened from a URL owns
// its *sql.DB, keeps up to OpenMaxIdleConns idle connections, and treats
// the pool as exclusive (see Options.ExclusivePool).
//
// # Guarantees
//
// A lock lives as long as its session: Lease.Expires is the zero time and
// the lock is not renewed. The driver checks each session every keep-alive
// period, and watches its socket when it knows it (see Options.Sockets and
// WatchSockets); a failed check ends the session with every lock on it
// (each lease's Done closes, its Err matches dlock.ErrLost). A session's
// wait_timeout is its locks' TTL, so a holder that vanishes without closing
// its connections loses the lock after the TTL, and a cut-off holder learns
// of the loss before the server can give the lock to anyone else. Fencing
// tokens strictly increase per name. Driver.LockName tells a lock's
// server-side name; waits for one name through one driver cost one server
// connection, and a cancelled wait leaves nothing queued on the server.
// User-level locks live in one server's memory, not replicated: a failover
// ends every lock. Check Err right before each write, and pass the fencing
// token to the resource.
//
// See https://github.com/dlockgo/dlock/blob/main/docs/MYSQL.md for the
// statements, server-side names, waiting and cancellation, the token
// table, loss detection, pool sizing, security, the limits and the
// measurements.
package mysqllock
