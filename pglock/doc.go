// Package pglock is dlock's PostgreSQL backend (schemes postgres:// and
// postgresql://), on github.com/jackc/pgx/v5. A lock is a session-level
// advisory lock, held for as long as the lease lives on one of the
// driver's sessions, which many locks share; its fencing token comes from
// a table the driver keeps.
//
// # URL
//
//	postgres://user:password@host:port/database?param=value&...
//
// for example
//
//	postgres://locker@10.0.0.5:5432/app?sslmode=verify-full&table=locks.dlock_tokens&keepalive=2s
//
// pglock reads these parameters:
//
//	table             the token table (default dlock_tokens; see Options.Table)
//	keepalive         the longest interval between two checks of a held lock's
//	                  connection (default 5s, at least 10ms; Options.Keepalive)
//	max_idle          idle connections kept for the next acquisitions (default 4;
//	                  0 keeps none)
//	session_locks     the most locks one session holds (default 256, at least 1;
//	                  Options.SessionLocks)
//	migrate           create the token table when the driver opens (default true)
//	server_keepalive  set the sessions' server-side keep-alive timeouts (default
//	                  true; see Options.NoServerKeepalive)
//
// besides dlock's shared ones (ttl, renew). Everything else is pgx's:
// its connection parameters (sslmode, connect_timeout — 10s when absent or
// 0, see DefaultConnectTimeout —, application_name,
// target_session_attrs, ...), and any other parameter as a run-time setting
// of every session (search_path=locks, lock_timeout=10s). The server checks
// those when the driver connects, as dlock.Open does at once: a setting it
// does not know, or a bad value, is a *dlock.ParamError naming the
// parameter, as is a bad value of pglock's own parameters or one pgx cannot
// parse. In code, use New or NewDriver with a *pgx.ConnConfig and Options.
//
// # Securing the store
//
// TLS and passwords are pgx's own URL parameters, passed through
// untouched: sslmode (verify-full checks the server's certificate and
// name), sslrootcert (the CA), sslcert and sslkey (a client certificate,
// for pg_hba's clientcert=verify-ca or cert), and the password in the
// user information:
//
//	postgres://locks:password@10.0.0.5:5432/locks?sslmode=verify-full&sslrootcert=/etc/dlock/ca.pem&sslcert=/etc/dlock/client.pem&sslkey=/etc/dlock/client-key.pem
//
// The least a role needs: CONNECT on its database, and either CREATE on
// the token table's schema (migrate, the default, creates the table and its
// sequence once) or, with migrate=false, SELECT, INSERT and UPDATE on a
// table made by Migrate; advisory locks need no privilege. TestSecured
// runs the conformance suite as a role that owns one database and nothing
// else, on a server that accepts only TLS connections with a client
// certificate and a SCRAM password (hostssl ... clientcert=verify-ca), and
// checks that a wrong password, a wrong CA, a missing client certificate
// and a plain connection fail Open with the server's or pgx's reason and no
// password.
//
// # Locks and connections
//
// The lock called name is the advisory lock on the bigint key Key(table,
// name), a hash of the table and the name (Key documents it, the SQL that
// computes it, and the chance of two names sharing a key: they would then
// exclude each other, which is safe).
//
// Session-level advisory locks belong to a session, and are re-entrant
// within it: a session asked for a key it holds gets it again. The driver
// opens its connections itself (never from a pool that could hand them to
// other code), and never asks a session for a key that the session holds
// or is being asked for: it keeps a table of the keys it holds, answers a
// TryLock at once with a *driver.HeldError when it holds the key already
// (for another owner), and makes a Lock wait in the process.
//
// Held locks share sessions: a session holds up to Options.SessionLocks
// locks (session_locks, default 256), so a driver holding n locks uses
// about n/256 connections, plus a few more while acquisitions run side by
// side (up to 16 sessions before acquisitions wait for one another's
// statements). A session that holds nothing more goes back to a small idle
// set (Options.MaxIdle). Statements on a session run one at a time; a
// caller's context bounds its wait for the session, never a statement on
// it, which a bound of its own (four keep-alive timeouts) ends instead, as
// a lost connection.
//
// TryLock runs pg_try_advisory_lock on a session: one round trip when a
// session is at hand. Lock does the same first, and when another session
// holds the lock, waits with pg_advisory_lock on a connection of its own,
// on the server; the connection then becomes a session holding that lock
// (and others later). One Lock per key and driver waits on the server; the
// driver's other Locks of that key wait in the process behind it, so W
// goroutines waiting for one name cost one connection. When the context
// of a wait on the server ends, the driver sends the server a cancel
// request for the query, so that the waiting request leaves the lock's
// queue at once, and closes the connection. Release runs
// pg_advisory_unlock on the holding session. So the connections of a
// driver are about held/SessionLocks, one per name waited for on the
// server, the idle ones and the listening one (see Lock kinds).
//
// # Fencing token
//
// The statement that takes the lock also advances the name's row in the
// token table, only when the lock was taken:
//
//	WITH l AS (SELECT pg_try_advisory_lock($1) AS ok)
//	INSERT INTO dlock_tokens AS t (name, token, acquired)
//	SELECT $2, nextval('dlock_tokens_seq'), clock_timestamp() FROM l WHERE l.ok
//	ON CONFLICT (name) DO UPDATE SET token = greatest(t.token + 1, excluded.token), acquired = excluded.acquired
//	RETURNING t.token
//
// Tokens come from the table's sequence (CACHE 1), and are at least one
// more than the name's row held (readers and permit holders update the
// row one after the other, so their tokens differ too). Each is drawn while the lock is held and
// committed before the lock can be released, so tokens strictly increase
// per name in the order the lock is held (and across names too), whether
// the lock was taken by a Driver or in a transaction (LockTx), and even
// when such a transaction rolls back. The table is created on first use
// (see Migrate).
//
// # Loss
//
// A lock lives as long as its session: Grant.Expires is zero and nothing
// is renewed. Each session has one keeper goroutine, for all its locks:
// while no statement runs on the connection, it waits for its socket to
// become readable, peeking (MSG_PEEK, never reading, so pgx's bytes stay
// put): the end of the stream, a socket error or an ErrorResponse (which a
// server sends unasked only before it closes the session) is a loss,
// noticed within about a round trip of pg_terminate_backend or a shutdown;
// other bytes (a notice, anything under TLS) make it ping at once, which
// reads them. It also pings every Options.Keepalive, or every third of the
// locks' TTL if that is shorter (a session holds locks of one such period),
// with a timeout of the interval (at least a second), for networks that go
// silent. Grant.Check, which Lease.Err calls, makes one non-blocking peek
// at the idle socket (while a statement runs, a look at the connection's
// TCP state instead, and no statement starts before a peek found the
// server still there), so a holder resumed after a pause sees a closed
// connection at its first Err. A lost connection loses every lock of its
// session at once: each lease's Done closes and its Err matches
// dlock.ErrLost; the driver closes the connection, so that the server
// frees the locks if it still has them. At most SessionLocks locks go
// with one connection. Lease.Refresh checks pg_locks for the lock on the
// session. The peek is Linux only; elsewhere the pings alone find a loss.
//
// When the holder is the one that vanished (a crash, a power cut, a
// partition), the server frees its locks when it notices the session is
// dead: at once when the client's kernel closed the connection; otherwise
// after the TCP keep-alive timeouts, which the driver sets on its sessions
// to about four keep-alive intervals (see Options.NoServerKeepalive) —
// longer than the holder takes to learn of the loss on its side. The
// driver's own sockets use the same TCP keep-alive timings, so that a wait
// on a server that went silent fails too.
//
// # Lock kinds
//
// The driver implements driver.Moder for every kind, and driver.Elector.
// Each kind has advisory keys of its own (ModeKey) and token rows of its
// own ("rw#name", "sem#name", "leader#name"), so the mutex, the
// readers-writer lock, the semaphore and the election called name never
// meet.
//
// A readers-writer lock is pg_advisory_lock_shared (Read) and
// pg_advisory_lock (Write) on one key, waiting on the server. PostgreSQL's
// lock manager queues waiters in order and grants a request only if it
// conflicts neither with the holders nor with the requests queued before
// it: a waiting writer blocks the readers that come after it (and
// pg_try_advisory_lock_shared fails meanwhile), and consecutive readers
// are granted together.
//
// A semaphore of limit permits is limit keys, one per slot (at most
// MaxPermits). A try takes the first free slot in one statement. A waiter
// listens on the semaphore's channel, then blocks on the server on the
// slot with the fewest waiting requests; it gets that slot when its holder
// releases it or its session ends, or gives up its request and tries all
// slots again when a release notifies the channel, which a release does
// only when no waiter blocked on its slot took it over. Waiters are not
// served in order of arrival.
//
// An election is an advisory key taken with pg_advisory_lock (candidates
// are elected in order); the statement that takes it writes the leader's
// value and session pid into its row and notifies the election's channel.
// Leader reads the row and checks in pg_locks that the session still
// holds the key. Observe follows notifications, and, while someone leads,
// also waits on the server for the key to be free (a shared request let
// go at once) to learn of a leader whose session died.
//
// Notifications come through one connection per driver that LISTENs for
// all its waiters and observers.
//
// # Transactions
//
// LockTx and TryLockTx take a transaction-scoped lock (pg_advisory_xact_lock)
// inside the caller's pgx.Tx, released at commit or rollback: the locking to
// use behind PgBouncer in transaction pooling mode, where session locks do
// not work.
//
// # Limits
//
// A lock does not expire while its session lives: a holder that is stuck
// but connected keeps it. A holder cut off from the server learns of the
// loss in its next check, but may have touched the resource meanwhile:
// pass the fencing token to the resource. Tokens are as durable as the
// server's commits (synchronous_commit on, the default). Advisory locks
// are not replicated: after a failover the locks are gone (their holders'
// connections fail) while tokens continue from the replicated sequence;
// with asynchronous replication, a failover that loses committed
// transactions can repeat tokens handed out just before it. A lost
// connection loses up to SessionLocks locks at once. The advisory locks
// held at once on a server are bounded by its shared lock table
// (max_locks_per_transaction × (max_connections +
// max_prepared_transactions), with some slack): a server with the default
// settings refuses further locks, with "out of shared memory", at about
// 12,800.
package pglock
