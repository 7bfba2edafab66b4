package safety

import (
	"context"
	"testing"
	"time"

	"github.com/dlockgo/dlock/internal/testenv"
)

// restarter kills servers (SIGKILL) right after a grant, keeps them down
// for down, starts them again, lets the clients work for gap, and again
// until the run ends.
func restarter(servers []*testenv.RedisServer, down, gap time.Duration) func(context.Context, *workers) {
	return func(ctx context.Context, w *workers) {
		for {
			if _, ok := nextFresh(ctx, w, 30*time.Millisecond); !ok {
				return
			}
			for _, s := range servers {
				s.Kill()
			}
			time.Sleep(down) // even if the run ends: the servers must come back
			for _, s := range servers {
				s.Start()
			}
			if !sleepCtx(ctx, gap) {
				return
			}
		}
	}
}

// TestRedisRestart kills -9 the Redis server right after a grant and
// starts it again 100ms later. Without persistence the lock is forgotten
// and handed out again while its holder works (overlaps); the fencing
// counter, reseeded from the server's clock, must not go back. With the
// append-only file (fsync always) the lock survives the restart.
func TestRedisRestart(t *testing.T) {
	for _, persist := range []bool{false, true} {
		fault := "kill -9 and restart, no persistence"
		if persist {
			fault = "kill -9 and restart, appendonly + fsync always"
		}
		t.Run(fault, func(t *testing.T) {
			srv := testenv.StartRedis(t, testenv.RedisOptions{Persist: persist})
			const ttl, hold = 500 * time.Millisecond, 750 * time.Millisecond
			wl := workload{
				url:     "redis://" + srv.Addr + "?" + redisClientParams,
				clients: 3,
				dur:     scale(3*time.Second, 15*time.Second),
				ttl:     ttl,
				hold:    hold,
				guard:   true,
			}
			r, _ := run(t, wl, restarter([]*testenv.RedisServer{srv}, 100*time.Millisecond, time.Second))
			report(t, "redis", fault, true, 1, r)
			wantZero(t, r.Regressions, "token regressions after restarts")
		})
	}
}

// TestRedlockRestart kills a majority (3 of 5) of Redlock's nodes right
// after a grant, without persistence. Restarted at once, they have
// forgotten the lock and a second client gets a quorum while the first
// still works: the overlap Redlock's analysis warns of. Restarted only
// after the TTL ("delayed restart"), every lock they held has expired by
// then, and no overlap is expected.
func TestRedlockRestart(t *testing.T) {
	const ttl, hold = time.Second, 300 * time.Millisecond
	for _, delayed := range []bool{false, true} {
		fault, down := "3 of 5 nodes killed and restarted at once, no persistence", 50*time.Millisecond
		if delayed {
			fault, down = "3 of 5 nodes killed, restarted after the TTL (delayed restart)", ttl+200*time.Millisecond
		}
		t.Run(fault, func(t *testing.T) {
			nodes := testenv.StartRedisN(t, 5, testenv.RedisOptions{})
			wl := workload{
				url:     "redlock://" + testenv.Addrs(nodes),
				clients: 3,
				dur:     scale(4*time.Second, 15*time.Second),
				ttl:     ttl,
				hold:    hold,
				guard:   true,
			}
			r, _ := run(t, wl, restarter(nodes[:3], down, 500*time.Millisecond))
			report(t, "redlock (5 nodes)", fault, true, 1, r)
			if delayed && r.Unnoticed != 0 {
				t.Errorf("%d unnoticed overlaps with a delayed restart", r.Unnoticed)
			}
		})
	}
}
