package safety

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dlockgo/dlock/internal/testenv"
)

// TestRedlockClock runs Redlock on 5 nodes, each redis-server on a fake
// wall clock of its own (testenv.FakeClock: an LD_PRELOAD shim). Right
// after a client is granted the lock, some nodes' clocks start to run 10×
// fast or jump 30s ahead; after 2 TTLs the fast ones return to the real
// rate (staying ahead), and the run goes on. Keys on a node whose clock
// runs ahead expire early. Redlock assumes the nodes' clocks run at about
// the client's rate; a node that breaks it can free the lock for another
// client while the holder still believes it holds it, until the holder's
// next renewal finds its keys gone. A majority of wrong clocks frees it on
// its own; a minority does when it holds keys of the holder's quorum and
// the holder has no more than a bare quorum (3 of 5), which is common
// when clients contend: the test counts both and asserts neither. The
// guard must refuse every stale write whatever happens, and tokens must
// keep increasing.
func TestRedlockClock(t *testing.T) {
	const ttl = time.Second
	type fault struct {
		fast, jump int // how many nodes run 10× fast, and how many jump 30s
	}
	for _, f := range []fault{{2, 0}, {0, 1}, {0, 2}, {3, 0}, {0, 3}, {2, 1}} {
		var desc string
		switch {
		case f.fast > 0 && f.jump > 0:
			desc = fmt.Sprintf("%d nodes' clocks 10× fast and %d jumping 30s ahead", f.fast, f.jump)
		case f.fast > 0:
			desc = fmt.Sprintf("%d of 5 nodes' clocks 10× fast", f.fast)
		default:
			desc = fmt.Sprintf("%d of 5 nodes' clocks jumping 30s ahead", f.jump)
		}
		fault := desc + " from a grant; TTL " + ttl.String()
		t.Run(fmt.Sprintf("fast%d_jump%d", f.fast, f.jump), func(t *testing.T) {
			clocks := make([]*testenv.FakeClock, 5)
			nodes := make([]*testenv.RedisServer, 5)
			for i := range nodes {
				clocks[i] = testenv.NewFakeClock(t)
				nodes[i] = testenv.StartRedis(t, testenv.RedisOptions{Env: clocks[i].Env()})
			}
			wl := workload{
				url:     "redlock://" + testenv.Addrs(nodes),
				clients: 3,
				dur:     scale(8*time.Second, 30*time.Second),
				ttl:     ttl,
				hold:    3 * ttl / 2, // across the first renewals
				timeout: 10 * time.Second,
				guard:   true,
			}
			r, times, _ := cutHolder(t, wl, cutPlan{part: 2 * ttl, gap: time.Second, anyClient: true, apply: func(on bool) {
				for i, c := range clocks[:f.fast+f.jump] {
					switch {
					case i >= f.fast: // jumped: stays ahead
						if on {
							c.Jump(30 * time.Second)
						}
					case on:
						c.SetRate(10)
					default:
						c.SetRate(1)
					}
				}
			}})
			reportCuts(t, "redlock (5 nodes)", fault, 1, r, times)
			if times.cuts == 0 {
				t.Fatal("no fault was injected")
			}
			wantZero(t, r.Regressions, "token regressions")
			t.Logf("%d of 5 clocks wrong: %d grants while an earlier lease still said held (the guard refused %d writes)", f.fast+f.jump, r.StillHeld, r.Rejected)
		})
	}
}

// TestZKClock runs a 3-server ZooKeeper ensemble, each server's JVM on a
// fake wall clock of its own, and right after a grant makes the leader's
// (or a follower's) wall clock jump 30s ahead. ZooKeeper times sessions
// with the JVM's monotonic clock (System.nanoTime), which the jump does
// not touch: no session may expire early, so no grant may come while an
// earlier holder's lease still says held.
func TestZKClock(t *testing.T) {
	const session = 2 * time.Second
	for _, role := range []string{"leader", "follower"} {
		t.Run(role, func(t *testing.T) {
			clocks := make([]*testenv.FakeClock, 3)
			for i := range clocks {
				clocks[i] = testenv.NewFakeClock(t)
			}
			c := testenv.StartZKWith(t, 3, testenv.ZKOptions{Env: func(id int) []string { return clocks[id-1].Env() }})
			// The run's window for faults starts with the workers: an
			// ensemble still electing its leader took most of it.
			if err := c.WaitServing(60 * time.Second); err != nil {
				t.Fatal(err)
			}
			wl := workload{
				url:     "zk://" + strings.Join(c.Addrs(), ",") + "/dlock-safety?session_timeout=" + session.String(),
				clients: 3,
				dur:     scale(12*time.Second, 30*time.Second), // the first session can take 5s on a loaded machine
				ttl:     session,
				hold:    session,
				timeout: 10 * time.Second,
				guard:   true,
			}
			r, times, _ := cutHolder(t, wl, cutPlan{part: 2 * session, gap: time.Second, anyClient: true, apply: func(on bool) {
				if !on {
					return // the clock stays ahead
				}
				for i, s := range c.Servers {
					if mode, _ := s.Mode(); mode == role {
						clocks[i].Jump(30 * time.Second)
						return
					}
				}
				t.Errorf("no server is %s", role)
			}})
			fault := fmt.Sprintf("the %s's wall clock jumping 30s ahead at a grant; session timeout %v", role, session)
			reportCuts(t, "zookeeper (3 servers)", fault, 1, r, times)
			checkCuts(t, r, times)
			if off := clocks[0].Offset() + clocks[1].Offset() + clocks[2].Offset(); off < 29*time.Second {
				t.Errorf("the clocks are %v ahead in all: the jumps did not happen", off)
			}
		})
	}
}
