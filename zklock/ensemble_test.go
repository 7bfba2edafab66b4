package zklock_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/internal/testenv"
)

// TestLeaderChange runs clients that hold and contend for a lock on a
// 3-node ensemble of the test's own, and kills the leader: there are never
// two holders, tokens keep strictly increasing, and the lock is granted
// again once a new leader is elected, within a bounded time.
func TestLeaderChange(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	c := testenv.StartZK(t, 3)
	servers := c.Addrs()
	prefix := testPrefix()
	const (
		timeout = 8 * time.Second // sessions outlive the election
		workers = 8
	)
	lockers := make([]*dlock.Locker, 4)
	for i := range lockers {
		lockers[i], _ = newLocker(t, servers, prefix, timeout)
	}

	type grant struct {
		token uint64
		at    time.Time
	}
	var (
		mu                sync.Mutex
		grants            []grant
		holders           peak
		acquireErrs, lost atomic.Int32
		lastErr           atomic.Value
		stop              = make(chan struct{})
		wg                sync.WaitGroup
	)
	for w := range workers {
		l := lockers[w%len(lockers)]
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				actx, acancel := context.WithTimeout(ctx, 30*time.Second)
				lease, err := l.Acquire(actx, "leader")
				acancel()
				if err != nil {
					acquireErrs.Add(1)
					lastErr.Store(err.Error())
					time.Sleep(20 * time.Millisecond)
					continue
				}
				holders.enter()
				mu.Lock()
				grants = append(grants, grant{lease.Token(), time.Now()})
				mu.Unlock()
				time.Sleep(2 * time.Millisecond)
				holders.leave()
				if err := lease.Release(ctx); err != nil {
					if errors.Is(err, dlock.ErrLost) {
						lost.Add(1)
					} else {
						t.Errorf("release: %v", err)
					}
				}
			}
		})
	}
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(grants)
	}
	time.Sleep(1500 * time.Millisecond)
	before := count()
	if before == 0 {
		close(stop)
		wg.Wait()
		t.Fatalf("no grant before the leader change (last error: %v)", lastErr.Load())
	}
	leader := c.Leader()
	if leader == nil {
		t.Fatal("no leader")
	}
	mu.Lock()
	oldEpoch := grants[len(grants)-1].token >> 32
	mu.Unlock()
	leader.Stop()
	killed := time.Now()
	elected := make(chan time.Duration, 1)
	go func() {
		for time.Since(killed) < 60*time.Second {
			if l := c.Leader(); l != nil && l != leader {
				elected <- time.Since(killed)
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		elected <- 0
	}()

	// Wait for the first grant of a lock node created under the new
	// leader (a zxid's high 32 bits are the leader's epoch).
	var regrant time.Duration
	deadline := killed.Add(60 * time.Second)
	for regrant == 0 && time.Now().Before(deadline) {
		mu.Lock()
		for _, g := range grants[before:] {
			if g.token>>32 > oldEpoch {
				regrant = g.at.Sub(killed)
				break
			}
		}
		mu.Unlock()
		time.Sleep(10 * time.Millisecond)
	}
	var firstAfter time.Duration
	mu.Lock()
	for _, g := range grants[before:] {
		if g.at.After(killed) {
			firstAfter = g.at.Sub(killed)
			break
		}
	}
	mu.Unlock()
	atRegrant := count()
	time.Sleep(2 * time.Second)
	close(stop)
	wg.Wait()

	after := count() - atRegrant
	t.Logf("leader (server %d) killed after %d grants; new leader serving at +%v; first grant after the kill at +%v, first grant under the new leader at +%v; %d grants in the 2s after; %d acquire errors (last: %v), %d leases lost",
		leader.ID, before, (<-elected).Round(time.Millisecond), firstAfter.Round(time.Millisecond), regrant.Round(time.Millisecond), after,
		acquireErrs.Load(), lastErr.Load(), lost.Load())
	if regrant == 0 {
		t.Fatalf("no lock granted under a new leader within %v of the kill", deadline.Sub(killed))
	}
	if regrant > 15*time.Second {
		t.Errorf("lock granted again only %v after the leader was killed", regrant)
	}
	if after == 0 {
		t.Error("no grant after the new leader's first")
	}
	if m := holders.max.Load(); m > 1 {
		t.Errorf("holders gauge reached %d: mutual exclusion broken", m)
	}
	bad := 0
	for i := 1; i < len(grants); i++ {
		if grants[i].token <= grants[i-1].token {
			if bad < 5 {
				t.Errorf("token %x (#%d) is not above token %x (#%d)", grants[i].token, i, grants[i-1].token, i-1)
			}
			bad++
		}
	}

	// The killed server comes back and rejoins as a follower.
	if err := leader.Start(); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitServing(60 * time.Second); err != nil {
		t.Fatal(err)
	}
}
