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
// process. Guards for resources in PostgreSQL, Redis and behind HTTP follow
// the same Guard interface.
//
// A guard protects only writes that go through it: the check and the write
// must be one atomic step on the resource's side (Memory.Do runs the write
// under the guard's lock for that reason).
package fence
