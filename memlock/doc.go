// Package memlock is dlock's in-process backend (scheme mem://): locks that
// live in the memory of one process. It is the reference implementation of
// the driver contract — every property of the conformance suite holds, and
// waiters are served first come, first served with a direct handoff — and
// it is handy in tests of code that takes locks.
//
// Every kind of lock is there: mutexes, readers-writer locks, semaphores
// and elections, each kind with names of its own. Each lock is a set of
// holders and one FIFO queue: a waiter is admitted at the head of the
// queue when the lock's rule lets it in, so consecutive readers enter
// together, a waiting writer holds back the readers behind it, and a
// semaphore's waiters take freed permits in order of arrival. Fencing
// tokens come from one counter for the whole store. A holder that stops
// renewing is dropped at its expiry by a timer that runs while someone
// waits or observes, so waiters and observers learn of it without polling.
// Observe sends each change as the store makes it, on a channel that holds
// the latest leader. It coordinates goroutines of one process only: it is
// not a distributed lock.
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
