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
// In code, use New or NewDriver with a *pgx.ConnConfig and Options.
//
// # URL
//
//	postgres://user:password@host:port/database?param=value&...
//
// pglock reads these parameters:
//
//	table             the token table (default dlock_tokens; Options.Table)
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
// besides dlock's shared ones (ttl, renew). Everything else is pgx's: its
// connection parameters (sslmode, sslrootcert, sslcert, sslkey,
// connect_timeout — 10s when absent or 0, see DefaultConnectTimeout —,
// application_name, ...), and any other parameter as a run-time setting of
// every session (search_path=locks). A parameter the server or pgx rejects,
// or a bad value of pglock's own, is a *dlock.ParamError naming it.
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
// See https://github.com/dlockgo/dlock/blob/main/docs/POSTGRES.md for keys,
// connection sharing, waiting and cancellation, the token statement, loss
// detection, the lock kinds, security, the limits and the measurements.
package pglock
