package safety

import (
	"fmt"
	"testing"
	"time"
)

// kindsUnderTest are the other kinds the suite runs under faults, as the
// worker names them.
var kindsUnderTest = []string{"rw", "permit", "leader"}

// checkKind fails t when a run of kind broke the kind's bound while the
// earlier holders' leases were still seen held, when Observe showed a
// leader nobody was granted or went back, or, for an election, when a
// token went back or the history is not one of a lock with one holder.
func checkKind(t *testing.T, kind string, r Result) {
	t.Helper()
	if r.Acquisitions == 0 {
		t.Fatalf("%s: no acquisition", kind)
	}
	if r.Excess != 0 {
		t.Errorf("%s: %d grants beyond the kind's bound (a writer beside a holder, a reader beside a writer, a permit beyond the limit, a second leader)", kind, r.Excess)
	}
	if r.BadObservations != 0 {
		t.Errorf("%s: Observe showed %d leaders that were not granted, or went back", kind, r.BadObservations)
	}
	if kind == "leader" && r.Regressions != 0 {
		t.Errorf("leader: %d token regressions", r.Regressions)
	}
	if r.NotLinearizable != 0 { // elections and semaphores are checked
		t.Errorf("%s: %d runs not linearizable", kind, r.NotLinearizable)
	}
}

// kindName names a kind's row: "readers-writer lock", "semaphore (2
// permits)", "election".
func kindName(kind string) string {
	switch kind {
	case "rw":
		return "readers-writer lock (2 reads to 1 write)"
	case "permit":
		return "semaphore (2 permits, 4 clients)"
	default:
		return "election (Campaign, and Observe in every client)"
	}
}

// TestKindsUnderPartition runs the readers-writer lock, the semaphore and
// the election on a 3-member etcd and ZooKeeper under the member
// partition of TestMemberPartition (the holder's member, a follower, cut
// off from the other two).
func TestKindsUnderPartition(t *testing.T) {
	const ttl = 2 * time.Second
	for _, st := range quorumStores(ttl) {
		for _, kind := range kindsUnderTest {
			t.Run(st.name+"/"+kind, func(t *testing.T) {
				r, times, backend := memberPartitionRun(t, st.start, "follower", cutOff, ttl, kind, true)
				fault := fmt.Sprintf("%s: holder's member (the follower) cut off from the other two; TTL %v", kindName(kind), ttl)
				reportCuts(t, backend, fault, 1, r, times)
				if times.cuts == 0 {
					t.Fatal("no cut was made")
				}
				checkKind(t, kind, r)
			})
		}
	}
}

// TestKindsUnderPause runs the other kinds on Redis under the paused
// holder of TestPausedHolder.
func TestKindsUnderPause(t *testing.T) {
	for _, kind := range kindsUnderTest {
		t.Run(kind, func(t *testing.T) {
			wl, inject := pausedRedis(t, true)
			wl.kind, wl.limit = kind, 2
			if kind == "permit" {
				wl.clients = max(wl.clients, 4)
			}
			r, _ := run(t, wl, inject)
			report(t, "redis", kindName(kind)+": holder paused past its TTL (SIGSTOP)", true, 1, r)
			checkKind(t, kind, r)
		})
	}
}
