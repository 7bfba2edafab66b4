package locktest

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockgo/dlock"
)

// LeaderKill describes the failover check of a replicated backend, which
// RunLeaderKill runs: contenders take one mutex in turn while the store's
// leader is killed and later brought back.
type LeaderKill struct {
	// Lockers are the contenders' clients; contender i uses
	// Lockers[i%len(Lockers)].
	Lockers []*dlock.Locker
	// Probe is a client of its own that takes a free lock after the kill,
	// to time how soon the store grants again.
	Probe *dlock.Locker
	// Name is the contended lock's name; the probe takes Name+"-probe".
	Name string
	// Contenders is how many goroutines contend; 8 when zero.
	Contenders int
	// Kill kills the leader (SIGKILL) and describes it, for the log.
	Kill func(t *testing.T) string
	// NewLeader waits, up to Bound, for a new leader and describes it.
	NewLeader func(t *testing.T) string
	// Restart starts the killed leader again; it rejoins as a follower.
	Restart func(t *testing.T)
	// Bound is how soon after the kill the probe must have a free lock,
	// and StallBound the longest the contended lock may go without a
	// grant around the kill.
	Bound, StallBound time.Duration
	// Warmup runs the contenders before the kill, Rejoin between the new
	// leader and the restart, After after it; each 1.5s when zero.
	Warmup, Rejoin, After time.Duration
}

// RunLeaderKill runs k: throughout, no two contenders hold the lock at
// once (a holders gauge) and the tokens increase in critical-section
// order; the probe gets a free lock within Bound of the kill, the
// contended lock goes at most StallBound without a grant, and it is
// granted after the old leader rejoined. It logs how long each took.
func RunLeaderKill(t *testing.T, ctx context.Context, k LeaderKill) {
	t.Helper()
	if k.Contenders == 0 {
		k.Contenders = 8
	}
	for _, d := range []*time.Duration{&k.Warmup, &k.Rejoin, &k.After} {
		if *d == 0 {
			*d = 1500 * time.Millisecond
		}
	}
	var (
		holders                        gauge
		acquireErrs, releaseErrs, lost atomic.Int32
		mu                             sync.Mutex
		tokens                         []uint64
		grants                         []time.Time
		stop                           = make(chan struct{})
		wg                             sync.WaitGroup
	)
	for g := range k.Contenders {
		wg.Go(func() {
			l := k.Lockers[g%len(k.Lockers)]
			for {
				select {
				case <-stop:
					return
				default:
				}
				actx, acancel := context.WithTimeout(ctx, 30*time.Second)
				lease, err := l.Acquire(actx, k.Name)
				acancel()
				if err != nil {
					if acquireErrs.Add(1) <= 3 {
						t.Logf("contender %d: Acquire: %v", g, err)
					}
					time.Sleep(10 * time.Millisecond)
					continue
				}
				holders.enter()
				mu.Lock()
				tokens = append(tokens, lease.Token())
				grants = append(grants, time.Now())
				mu.Unlock()
				time.Sleep(time.Millisecond)
				holders.leave()
				rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
				err = lease.Release(rctx)
				rcancel()
				switch {
				case err == nil:
				case errors.Is(err, dlock.ErrLost):
					lost.Add(1)
				default:
					if releaseErrs.Add(1) <= 3 {
						t.Logf("contender %d: Release: %v", g, err)
					}
				}
			}
		})
	}
	stopContenders := sync.OnceFunc(func() {
		close(stop)
		wg.Wait()
	})
	defer stopContenders()

	time.Sleep(k.Warmup)
	mu.Lock()
	before := len(grants)
	mu.Unlock()
	what := k.Kill(t)
	killed := time.Now()
	t.Logf("killed the leader %s after %d grants", what, before)

	var probeAt time.Duration
	for {
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		lease, err := k.Probe.TryAcquire(pctx, k.Name+"-probe")
		pcancel()
		if err == nil {
			probeAt = time.Since(killed)
			_ = lease.Release(ctx)
			break
		}
		if time.Since(killed) > k.Bound {
			t.Fatalf("no free lock could be taken within %v of the leader's kill: %v", k.Bound, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	newLeader := k.NewLeader(t)
	electedBy := time.Since(killed)

	time.Sleep(k.Rejoin)
	k.Restart(t)
	rejoined := time.Now()
	time.Sleep(k.After)
	stopContenders()

	mu.Lock()
	defer mu.Unlock()
	if m := holders.max.Load(); m > 1 {
		t.Errorf("holders gauge reached %d: mutual exclusion broken", m)
	}
	CheckIncreasing(t, tokens)
	var firstAfter, stall time.Duration = -1, 0
	afterRejoin := 0
	for i, at := range grants {
		if i > 0 && at.After(killed) {
			stall = max(stall, at.Sub(grants[i-1]))
		}
		if firstAfter < 0 && at.After(killed) {
			firstAfter = at.Sub(killed)
		}
		if at.After(rejoined) {
			afterRejoin++
		}
	}
	t.Logf("new leader %s known %v after the kill; a free lock granted after %v; the contended lock granted %v after the kill, longest gap between grants %v",
		newLeader, electedBy, probeAt, firstAfter, stall)
	t.Logf("%d grants in all, %d after the kill, %d after the old leader rejoined; %d acquire errors, %d release errors, %d leases lost",
		len(grants), len(grants)-before, afterRejoin, acquireErrs.Load(), releaseErrs.Load(), lost.Load())
	if firstAfter < 0 || stall > k.StallBound {
		t.Errorf("the contended lock went %v without a grant around the leader's kill, want at most %v", stall, k.StallBound)
	}
	if afterRejoin == 0 {
		t.Error("no grant after the old leader rejoined")
	}
}
