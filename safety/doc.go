// Package safety is dlock's fault-injection safety suite: it runs several
// real client processes against a backend, injects faults (paused holders,
// killed and restarted servers, a Redis failover, cut and delayed
// connections, expired sessions, stopped leaders, killed database
// connections, partitions between cluster members on test hosts in
// network namespaces, servers' clocks running fast or jumping) on every
// kind of lock, and checks the recorded history.
//
// The package's own code is the checkers over a history made of the
// clients' acquisitions and the fenced resource's ordered log of writes:
// Check, exact, counts overlaps, stale writes, token regressions and
// grants beyond a kind's bound; CheckLinear asks whether the history is
// linearizable against a fenced lock; CheckObserved checks what Observe
// showed. The suite itself is the package's tests; docs/SAFETY.md has the
// tables they produce and the command that produces them:
//
//	go test -timeout 30m ./safety/    # small size, as in CI (as root: test networks)
//	go test ./safety/ -run . -count=1 -v -timeout 80m -safety.full -safety.table SAFETY-table.md
//
// DLOCK_SAFETY=full in the environment means the same as -safety.full;
// without -safety.table the full run writes dlock-safety-table.md in the
// temporary directory. DLOCK_SAFETY_DUMP=1 logs every critical section.
// The worker processes are built from safety/internal/worker once per
// run; the network faults go through safety/internal/faultproxy.
package safety
