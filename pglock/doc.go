// Package pglock is dlock's PostgreSQL backend (schemes postgres:// and
// postgresql://), on github.com/jackc/pgx/v5. A lock is a session-level
// advisory lock, held for as long as the lease lives on one of the
// driver's sessions, which many locks share; its fencing token comes from
// a table the driver keeps.
//
// Import the package for its side effect and open a URL:
//
//	import _ "github.com/dlockgo/dlock/pglock"
//
//	locker, err := dlock.Open(ctx, "postgres://locker@10.0.0.5:5432/app?sslmode=verify-full&keepalive=2s")
//
// In code, use New or NewDriver with Options and a *pgx.ConnConfig from
// pgx.ParseConfig, not a pool (the driver must own its connections; see
// Connections in docs/POSTGRES.md):
//
//	cfg, err := pgx.ParseConfig("postgres://locker@10.0.0.5:5432/app?sslmode=verify-full")
//	locker, err := pglock.New(ctx, cfg, &pglock.Options{Table: "locks.dlock_tokens"})
//
// The driver copies the config, dials one connection to check the server
// and create the table, and keeps it idle. Close closes only the driver's
// own connections.
//
// # URL
//
//	postgres://user:password@host:port/database?param=value&...
//
// pglock reads these parameters:
//
//	table             the token table, a lower-case identifier, optionally
//	                  schema.table; its sequence is <table>_seq (default
//	                  dlock_tokens; Options.Table)
//	keepalive         the longest interval between two checks of a held lock's
//	                  connection (default 5s, at least 10ms; Options.Keepalive)
//	max_idle          idle connections kept for the next acquisitions (default 4;
//	                  0 keeps none)
//	session_locks     the most locks one session holds, and so what one lost
//	                  connection takes with it (default 256, at least 1;
//	                  Options.SessionLocks)
//	migrate           create the token table when the driver opens (default true)
//	server_keepalive  set the sessions' server-side keep-alive timeouts (default
//	                  true; see Options.NoServerKeepalive)
//
// besides dlock's shared ones, ttl and renew: a session lock is not
// renewed, but the TTL shortens the keep-alive interval to TTL/3.
//
// pglock strips its own parameters and dlock's, and hands the rest of the
// URL to pgx.ParseConfig: pgx's connection parameters (sslmode,
// sslrootcert, sslcert, sslkey, application_name, target_session_attrs,
// connect_timeout, ...), and any other parameter as a run-time setting of
// every session (search_path=locks, lock_timeout=10s). connect_timeout
// bounds each connection attempt (TCP, TLS, start-up) in seconds; without
// it (nor PGCONNECT_TIMEOUT), or with 0, the driver uses
// DefaultConnectTimeout, 10s, and the error then says the connect timeout
// ran out. The caller's context bounds the attempt too.
//
// dlock.Open connects at once, so the server judges the run-time settings:
// one it does not know (SQLSTATE 42704) or a bad value (22023) is a
// *dlock.ParamError naming the parameter, as are a value pgx cannot parse
// (sslmode=bogus) and a bad value of pglock's own parameters. So
// colour=red is an error naming colour, while application_name=x works.
//
// # Guarantees
//
// A lock lives as long as its session: Grant.Expires is zero and nothing
// is renewed. One keeper goroutine per session watches its socket and pings
// it; a lost connection loses every lock of its session at once (each
// lease's Done closes, its Err matches dlock.ErrLost). Fencing tokens come
// from the token table's sequence and strictly increase per name in the
// order the lock is held, for Driver locks and LockTx alike. The driver
// implements driver.Moder for every kind (readers-writer locks on shared
// advisory locks, semaphores of up to MaxPermits slots) and driver.Elector.
// LockTx and TryLockTx take a transaction-scoped lock inside the caller's
// pgx.Tx, for PgBouncer in transaction pooling mode. Advisory locks are not
// replicated: a failover loses them. A holder cut off from the server may
// touch the resource before it learns of the loss: pass the fencing token
// to the resource.
//
// # Securing the store
//
// TLS and passwords are pgx's parameters, passed through:
//
//	postgres://locks:password@10.0.0.5:5432/locks?sslmode=verify-full&sslrootcert=/etc/dlock/ca.pem&sslcert=/etc/dlock/client.pem&sslkey=/etc/dlock/client-key.pem
//
// A role needs CONNECT on its database and CREATE on the token table's
// schema (or, with migrate=false, SELECT, INSERT, UPDATE on a table made
// by Migrate and USAGE on its sequence); advisory locks need no privilege.
// Use the writer endpoint (the primary) of a replicated service, never a
// reader endpoint.
//
// See https://github.com/dlockgo/dlock/blob/main/docs/POSTGRES.md for the
// keys, connections, waiting, the token, loss, the lock kinds, the test of
// TLS and roles, the limits and the measurements.
package pglock
