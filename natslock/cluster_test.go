package natslock_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/locktest"
	"github.com/dlockgo/dlock/natslock"
)

// TestStreamLeaderKill runs 8 contenders over 4 clients on one lock of an
// R3 bucket on a 3-server cluster, kills the bucket stream's leader
// (SIGKILL) mid-run, and later brings it back (locktest.RunLeaderKill).
// Throughout, no two contenders hold the lock at once and the tokens
// increase in critical-section order; it reports how long the cluster
// took to elect a stream leader, to grant a free lock (a TryAcquire
// probe), and to hand the contended lock on.
func TestStreamLeaderKill(t *testing.T) {
	c := testenv.StartNATS(t, 3)
	o := &natslock.Options{Bucket: randomBucket(), Replicas: 3, RequestTimeout: time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), 240*time.Second)
	defer cancel()
	const ttl = 5 * time.Second
	lockers := make([]*dlock.Locker, 4)
	for i := range lockers {
		lockers[i] = newLocker(t, c, o, dlock.WithTTL(ttl))
	}
	js, err := jetstream.New(c.Conn(t))
	if err != nil {
		t.Fatal(err)
	}
	stream := "KV_" + o.Bucket
	var leader *testenv.NATSServer
	locktest.RunLeaderKill(t, ctx, locktest.LeaderKill{
		Lockers: lockers,
		// A client made before the kill: binding the bucket reads its
		// stream's information, which nobody answers until a leader is
		// elected.
		Probe: newLocker(t, c, o, dlock.WithTTL(ttl)),
		Name:  "leader-kill",
		Kill: func(t *testing.T) string {
			if leader = c.StreamLeader(ctx, js, stream); leader == nil {
				t.Fatal("no leader for the bucket's stream")
			}
			leader.Kill()
			return leader.String()
		},
		NewLeader: func(t *testing.T) string {
			for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
				if s := c.StreamLeader(ctx, js, stream); s != nil {
					return s.String()
				}
			}
			return "none"
		},
		Restart: func(t *testing.T) { leader.Start() },
		// A stream's servers elect a new leader after 4 to 9 seconds
		// without one (nats-server's Raft timeouts, not configurable);
		// the contended lock then waits for the contenders' next try
		// (up to a second after an error) and a request timeout. Hang
		// bounds, 10× that.
		Bound:      100 * time.Second,
		StallBound: 100 * time.Second,
		Warmup:     2 * time.Second,
		Rejoin:     3 * time.Second,
		After:      3 * time.Second,
	})
}
