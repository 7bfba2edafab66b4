package safety

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/dlockgo/dlock/internal/testenv"
)

// pauser SIGSTOPs the holder of a section that just started, for pause
// (longer than the TTL), then lets the others run undisturbed for gap,
// and again until the run ends.
func pauser(hold, pause, gap time.Duration) func(context.Context, *workers) {
	return func(ctx context.Context, w *workers) {
		for {
			e, ok := nextFresh(ctx, w, hold)
			if !ok {
				return
			}
			w.pause(e.client, pause)
			if !sleepCtx(ctx, gap) {
				return
			}
		}
	}
}

// pausedRedis is the workload of the pause faults on the shared Redis.
func pausedRedis(t *testing.T, guard bool) (workload, func(context.Context, *workers)) {
	const ttl, hold = 500 * time.Millisecond, 60 * time.Millisecond
	wl := workload{
		url:     "redis://" + testenv.RedisAddr(t),
		clients: scale(3, 5),
		dur:     scale(4*time.Second, 15*time.Second),
		ttl:     ttl,
		hold:    hold,
		guard:   guard,
	}
	return wl, pauser(hold, 3*ttl, 300*time.Millisecond)
}

// TestPositiveControl runs the paused-holder fault with the guard off:
// the checker must see the paused holders' sections overlap their
// successors' and their stale writes land. Without this, zeros elsewhere
// would prove nothing.
func TestPositiveControl(t *testing.T) {
	wl, inject := pausedRedis(t, false)
	r, _ := run(t, wl, inject)
	report(t, "redis (positive control)", "holder paused past its TTL (SIGSTOP), guard off", false, 1, r)
	if r.Overlaps == 0 {
		t.Errorf("no overlapping sections seen although holders were paused past their TTL: %+v", r)
	}
	if r.StaleAccepted == 0 {
		t.Errorf("no stale write accepted with the guard off although holders were paused past their TTL: %+v", r)
	}
	if r.NotLinearizable == 0 {
		t.Errorf("the history with stale writes accepted passed the linearizability check: %+v", r)
	}
}

// TestPausedHolder SIGSTOPs real worker processes in their critical
// section for three TTLs. The lock lets another client in (a TTL lock
// cannot stop that: (a) > 0 is expected); the guard must refuse every
// write of the paused holder, and tokens must keep increasing.
func TestPausedHolder(t *testing.T) {
	t.Run("redis", func(t *testing.T) {
		wl, inject := pausedRedis(t, true)
		r, _ := run(t, wl, inject)
		report(t, "redis", "holder paused past its TTL (SIGSTOP)", true, 1, r)
		checkPaused(t, r)
	})
	// ttl is the lock's TTL, or the session timeout, on etcd, NATS and
	// ZooKeeper; paused runs small (the run's length at small size) on url,
	// pausing holders for pause.
	const ttl, hold = time.Second, 100 * time.Millisecond
	paused := func(t *testing.T, backend, fault, url string, small, pause time.Duration) {
		wl := workload{url: url, clients: scale(3, 5), dur: scale(small, 20*time.Second), ttl: ttl, hold: hold, guard: true}
		r, _ := run(t, wl, pauser(hold, pause, 300*time.Millisecond))
		report(t, backend, fault, true, 1, r)
		checkPaused(t, r)
	}
	t.Run("etcd", func(t *testing.T) {
		// etcd leases count whole seconds, and a short one is stretched
		// to the server's minimum: pause for long enough anyway.
		paused(t, "etcd", "holder paused past its TTL (SIGSTOP)",
			"etcd://"+strings.Join(testenv.EtcdEndpoints(t), ","), 6*time.Second, 5*time.Second)
	})
	t.Run("nats", func(t *testing.T) {
		// A paused holder stops renewing: its key's per-key TTL runs
		// out on the server and another client's Create succeeds.
		c := testenv.StartNATS(t, 1)
		paused(t, "nats", "holder paused past its TTL (SIGSTOP)", "nats://"+c.URL()+"/dlock-safety", 5*time.Second, 3*ttl)
	})
	t.Run("zookeeper", func(t *testing.T) {
		// A paused client stops its heartbeats: the server expires its
		// session (and the lock's ephemeral node) after the timeout.
		paused(t, "zookeeper", "holder paused past its session timeout (SIGSTOP): session expiry",
			"zk://"+testenv.ZKAddr(t)+"/dlock-safety?session_timeout="+ttl.String(), 5*time.Second, 3*ttl)
	})
}

// checkPaused asserts what a paused-holder run must show with the guard
// on: the fault bit (a stale write was refused) and tokens increased.
func checkPaused(t *testing.T, r Result) {
	t.Helper()
	if r.Rejected == 0 {
		t.Errorf("the guard refused no write: no pause hit a holder whose lock then went to another client: %+v", r)
	}
	wantZero(t, r.Regressions, "token regressions")
	// A stopped holder makes no looks: none may find its lease held once
	// another client has the lock, and the history, guard included, must
	// be one of a fenced lock.
	wantZero(t, r.StillHeld, "grants while an earlier holder's lease was still seen held")
	wantZero(t, r.NotLinearizable, "runs not linearizable against the fenced lock")
}
