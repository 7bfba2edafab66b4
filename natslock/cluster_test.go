package natslock_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/natslock"
)

// TestStreamLeaderKill runs 8 contenders over 4 clients on one lock of an
// R3 bucket on a 3-server cluster, kills the bucket stream's leader
// (SIGKILL) mid-run, and later brings it back. Throughout, no two
// contenders hold the lock at once and the tokens increase in
// critical-section order; it reports how long the cluster took to grant
// the contended lock again and a free one (a TryAcquire probe).
func TestStreamLeaderKill(t *testing.T) {
	c := testenv.StartNATS(t, 3)
	o := &natslock.Options{Bucket: randomBucket(), Replicas: 3, RequestTimeout: time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	const (
		ttl        = 5 * time.Second
		contenders = 8
		// The contended lock's longest gap between grants, at most: the
		// stream's election, the clients' reconnection (those on the
		// killed server) and a request timeout.
		stallBound = 30 * time.Second
	)
	lockers := make([]*dlock.Locker, 4)
	for i := range lockers {
		lockers[i] = newLocker(t, c, o, dlock.WithTTL(ttl))
	}
	js, err := jetstream.New(c.Conn(t))
	if err != nil {
		t.Fatal(err)
	}

	var (
		holders, maxHolders atomic.Int32
		acquireErrs         atomic.Int32
		releaseErrs         atomic.Int32
		lost                atomic.Int32
		mu                  sync.Mutex
		tokens              []uint64
		grants              []time.Time
		stop                = make(chan struct{})
		wg                  sync.WaitGroup
	)
	for g := range contenders {
		wg.Go(func() {
			l := lockers[g%len(lockers)]
			for {
				select {
				case <-stop:
					return
				default:
				}
				actx, acancel := context.WithTimeout(ctx, 30*time.Second)
				lease, err := l.Acquire(actx, "leader-kill")
				acancel()
				if err != nil {
					if acquireErrs.Add(1) <= 3 {
						t.Logf("contender %d: Acquire: %v", g, err)
					}
					time.Sleep(10 * time.Millisecond)
					continue
				}
				n := holders.Add(1)
				for m := maxHolders.Load(); n > m && !maxHolders.CompareAndSwap(m, n); m = maxHolders.Load() {
				}
				mu.Lock()
				tokens = append(tokens, lease.Token())
				grants = append(grants, time.Now())
				mu.Unlock()
				time.Sleep(time.Millisecond)
				holders.Add(-1)
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

	probe := newLocker(t, c, o, dlock.WithTTL(ttl))
	time.Sleep(2 * time.Second)
	leader := c.StreamLeader(ctx, js, "KV_"+o.Bucket)
	if leader == nil {
		t.Fatal("no leader for the bucket's stream")
	}
	mu.Lock()
	before := len(grants)
	mu.Unlock()
	leader.Kill()
	killed := time.Now()
	t.Logf("killed the stream leader %s after %d grants", leader, before)

	var probeAt time.Duration
	for {
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		lease, err := probe.TryAcquire(pctx, "leader-kill-probe")
		pcancel()
		if err == nil {
			probeAt = time.Since(killed)
			_ = lease.Release(ctx)
			break
		}
		if time.Since(killed) > stallBound {
			t.Fatalf("no free lock could be taken within %v of the leader's kill: %v", stallBound, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	var newLeader *testenv.NATSServer
	for newLeader == nil && time.Since(killed) < stallBound {
		newLeader = c.StreamLeader(ctx, js, "KV_"+o.Bucket)
	}
	electedBy := time.Since(killed)

	time.Sleep(3 * time.Second)
	leader.Start() // the old leader rejoins as a follower
	rejoined := time.Now()
	time.Sleep(3 * time.Second)
	close(stop)
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	if m := maxHolders.Load(); m > 1 {
		t.Errorf("holders gauge reached %d: mutual exclusion broken", m)
	}
	checkIncreasing(t, tokens)
	var firstAfter, stall time.Duration = -1, 0
	for i, at := range grants {
		if i > 0 && at.After(killed) {
			stall = max(stall, at.Sub(grants[i-1]))
		}
		if firstAfter < 0 && at.After(killed) {
			firstAfter = at.Sub(killed)
		}
	}
	afterRejoin := 0
	for _, at := range grants {
		if at.After(rejoined) {
			afterRejoin++
		}
	}
	t.Logf("new stream leader %v known %v after the kill; a free lock granted %v after the kill; the contended lock granted %v after the kill, longest gap between grants %v",
		newLeader, electedBy, probeAt, firstAfter, stall)
	t.Logf("%d grants in all, %d after the kill, %d after the old leader rejoined; %d acquire errors, %d release errors, %d leases lost",
		len(grants), len(grants)-before, afterRejoin, acquireErrs.Load(), releaseErrs.Load(), lost.Load())
	if firstAfter < 0 || stall > stallBound {
		t.Errorf("the contended lock went %v without a grant around the leader's kill, want at most %v", stall, stallBound)
	}
	if afterRejoin == 0 {
		t.Error("no grant after the old leader rejoined")
	}
}

func checkIncreasing(t *testing.T, tokens []uint64) {
	t.Helper()
	if len(tokens) == 0 {
		t.Error("no tokens")
		return
	}
	bad := 0
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			if bad < 5 {
				t.Errorf("token %d (#%d) is not greater than token %d (#%d)", tokens[i], i, tokens[i-1], i-1)
			}
			bad++
		}
	}
	if bad > 5 {
		t.Errorf("... %d tokens out of order in all", bad)
	}
}
