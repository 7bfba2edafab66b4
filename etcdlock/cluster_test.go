package etcdlock_test

import (
	"testing"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/locktest"
)

// TestLeaderStop runs 8 contenders over 4 clients on one lock of a
// 3-member cluster, kills the leader mid-run (SIGKILL), and later brings
// it back (locktest.RunLeaderKill). Throughout, no two contenders hold
// the lock at once and the tokens increase in critical-section order;
// after the kill the lock is granted again (hang bounds of 20s, 10× the
// election plus the driver's request timeout). It reports how
// long the cluster took to elect a new leader, to grant a free lock (a
// TryAcquire probe), and to hand the contended lock on.
func TestLeaderStop(t *testing.T) {
	cluster := testenv.StartEtcd(t, testenv.EtcdOptions{Members: 3})
	eps := cluster.Endpoints()
	prefix := randomPrefix()
	ctx := locktest.Context(t, 90*time.Second)
	const ttl = 3 * time.Second
	lockers := make([]*dlock.Locker, 4)
	for i := range lockers {
		lockers[i] = newLocker(t, eps, prefix, dlock.WithTTL(ttl))
	}
	var leader *testenv.EtcdMember
	locktest.RunLeaderKill(t, ctx, locktest.LeaderKill{
		Lockers: lockers,
		Probe:   newLocker(t, eps, prefix, dlock.WithTTL(ttl)),
		Name:    "leader-stop",
		Kill: func(t *testing.T) string {
			leader = cluster.WaitLeader(5 * time.Second)
			leader.Kill()
			return leader.String()
		},
		NewLeader: func(t *testing.T) string { return cluster.WaitLeader(10 * time.Second).String() },
		Restart:   func(t *testing.T) { leader.Start() },
		// Hang bounds: the contended lock's longest gap between grants is
		// expected to be the election (500ms-1s, longer on a split vote)
		// plus the driver's request timeout (1s); the gap is logged.
		Bound:      20 * time.Second,
		StallBound: 20 * time.Second,
		Rejoin:     2 * time.Second,
	})
}
