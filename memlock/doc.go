// Package memlock is dlock's in-process backend (scheme mem://): locks that
// live in the memory of one process. It is the reference implementation of
// the driver contract — every property of the conformance suite holds, and
// waiters are served first come, first served with a direct handoff — and
// it is handy in tests of code that takes locks.
//
// It coordinates goroutines of one process only: it is not a distributed
// lock.
//
// # URL
//
//	mem://          the process's default store
//	mem://name      a separate, named store: Lockers opened with the same
//	                name share locks; different names never do
//
// memlock takes no parameters of its own beyond dlock's shared ones (ttl,
// renew), for example mem://jobs?ttl=10s.
package memlock
