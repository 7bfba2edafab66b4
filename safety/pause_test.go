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
			select {
			case <-ctx.Done():
				return
			case e := <-w.enters:
				if !fresh(e, hold) {
					continue
				}
				w.pause(e.client, pause)
				select {
				case <-ctx.Done():
					return
				case <-time.After(gap):
				}
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
	t.Run("etcd", func(t *testing.T) {
		// etcd leases count whole seconds, and a short one is stretched
		// to the server's minimum: pause for long enough anyway.
		const ttl, hold = time.Second, 100 * time.Millisecond
		wl := workload{
			url:     "etcd://" + strings.Join(testenv.EtcdEndpoints(t), ","),
			clients: scale(3, 5),
			dur:     scale(6*time.Second, 20*time.Second),
			ttl:     ttl,
			hold:    hold,
			guard:   true,
		}
		r, _ := run(t, wl, pauser(hold, 5*time.Second, 300*time.Millisecond))
		report(t, "etcd", "holder paused past its TTL (SIGSTOP)", true, 1, r)
		checkPaused(t, r)
	})
	t.Run("nats", func(t *testing.T) {
		// A paused holder stops renewing: its key's per-key TTL runs
		// out on the server and another client's Create succeeds.
		const ttl, hold = time.Second, 100 * time.Millisecond
		c := testenv.StartNATS(t, 1)
		wl := workload{
			url:     "nats://" + c.URL() + "/dlock-safety",
			clients: scale(3, 5),
			dur:     scale(5*time.Second, 20*time.Second),
			ttl:     ttl,
			hold:    hold,
			guard:   true,
		}
		r, _ := run(t, wl, pauser(hold, 3*ttl, 300*time.Millisecond))
		report(t, "nats", "holder paused past its TTL (SIGSTOP)", true, 1, r)
		checkPaused(t, r)
	})
	t.Run("zookeeper", func(t *testing.T) {
		// A paused client stops its heartbeats: the server expires its
		// session (and the lock's ephemeral node) after the timeout.
		const session, hold = time.Second, 100 * time.Millisecond
		wl := workload{
			url:     "zk://" + testenv.ZKAddr(t) + "/dlock-safety?session_timeout=" + session.String(),
			clients: scale(3, 5),
			dur:     scale(5*time.Second, 20*time.Second),
			ttl:     session,
			hold:    hold,
			guard:   true,
		}
		r, _ := run(t, wl, pauser(hold, 3*session, 300*time.Millisecond))
		report(t, "zookeeper", "holder paused past its session timeout (SIGSTOP): session expiry", true, 1, r)
		checkPaused(t, r)
	})
}

// checkPaused asserts what a paused-holder run must show with the guard
// on: the fault bit (a stale write was refused) and tokens increased.
func checkPaused(t *testing.T, r Result) {
	t.Helper()
	if r.Rejected == 0 {
		t.Errorf("the guard refused no write: no pause hit a holder whose lock then went to another client: %+v", r)
	}
	if r.Regressions != 0 {
		t.Errorf("%d token regressions", r.Regressions)
	}
	// A stopped holder makes no looks: none may find its lease held once
	// another client has the lock, and the history, guard included, must
	// be one of a fenced lock.
	if r.StillHeld != 0 {
		t.Errorf("%d grants while an earlier holder's lease was still seen held", r.StillHeld)
	}
	if r.NotLinearizable != 0 {
		t.Errorf("%d runs not linearizable against the fenced lock", r.NotLinearizable)
	}
}
