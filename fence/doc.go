// Package fence holds resource-side guards that reject stale fencing
// tokens.
//
// A lock with a TTL cannot stop a holder that was paused (a long GC, a
// SIGSTOP, a slow disk) or cut off from the store: its lock expires, a
// second client takes the lock, and the first wakes up still believing it
// holds it. The remedy is on the resource's side. Every dlock lease carries
// a fencing token (Lease.Token) that strictly increases with each
// acquisition of a name; the holder sends it with every write, and the
// resource accepts a write only if its token is at least the highest token
// it has seen for that resource. The paused holder's write then carries a
// token lower than its successor's and is rejected with an error matching
// ErrStale (a *StaleError with both tokens).
//
// A Guard makes that check and records the token in one atomic step. This
// package has the in-memory guard, Memory, for a resource that lives in one
// process. Sub-packages hold the guards for resources in stores, so that a
// program compiles only the client it uses:
//
//   - fence/pgfence admits a token inside the caller's PostgreSQL
//     transaction, so that the write and the check commit together;
//   - fence/redisfence writes a Redis value only with a current token, in
//     one script.
//
// For a resource behind an HTTP service, Transport sends the token in the
// TokenHeader ("Dlock-Fencing-Token") of every request, and Middleware
// admits it with any Guard before the handler runs, answering 409 Conflict
// to a stale token; ResponseError turns that answer back into a
// *StaleError.
//
// A guard protects only writes that go through it: the check and the write
// must be one atomic step on the resource's side (Memory.Do runs the write
// under the guard's lock for that reason).
package fence
