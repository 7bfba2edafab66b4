package zklock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/locktest"
	"github.com/dlockgo/dlock/zklock"
)

// TestLeaderChange runs clients that hold and contend for a lock on a
// 3-node ensemble of the test's own, and kills the leader: there are never
// two holders, tokens keep strictly increasing, and the lock is granted
// again once a new leader is elected, within a bounded time.
func TestLeaderChange(t *testing.T) {
	ctx := locktest.Context(t, 120*time.Second)
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

// TestCutOffFollower: a holder connected only to a follower that is cut
// off from the rest of its ensemble must see its lease lost (Err non-nil)
// before a client on the leader gets the lock, although the follower keeps
// answering its pings for syncLimit × tickTime. Twenty runs on each of two
// ensembles whose inter-node links go through the test's proxies: one
// where syncLimit × tickTime (1s) is shorter than the session timeout, one
// where it is longer (3s).
func TestCutOffFollower(t *testing.T) {
	for _, syncLimit := range []int{5, 15} {
		t.Run(fmt.Sprintf("syncLimit%d", syncLimit), func(t *testing.T) {
			t.Parallel()
			cutOffFollower(t, syncLimit)
		})
	}
}

func cutOffFollower(t *testing.T, syncLimit int) {
	const (
		tick    = 200 * time.Millisecond
		timeout = 2 * time.Second
		runs    = 20
	)
	links := &peerLinks{t: t}
	c := testenv.StartZKWith(t, 3, testenv.ZKOptions{Tick: tick, SyncLimit: syncLimit, Peer: links.dial})
	var (
		diffs  []time.Duration // holder's last "held" − other's grant
		unsafe int
	)
	for run := range runs {
		if err := c.WaitServing(60 * time.Second); err != nil {
			t.Fatal(err)
		}
		leader := c.Leader()
		var follower *testenv.ZKServer
		for _, s := range c.Servers {
			if m, err := s.Mode(); err == nil && m == "follower" {
				follower = s
				break
			}
		}
		if leader == nil || follower == nil {
			t.Fatalf("run %d: no leader (%v) or no follower (%v)", run, leader, follower)
		}
		d := cutRun(t, links, leader, follower, timeout)
		diffs = append(diffs, d)
		if d >= 0 {
			unsafe++
			t.Errorf("run %d: the holder on follower %d still saw its lease held %v after the client on leader %d got the lock",
				run, follower.ID, d, leader.ID)
		}
	}
	slices.Sort(diffs)
	t.Logf("tick %v, syncLimit %d, session timeout %v: %d of %d runs unsafe; holder's last held − other's grant: min %v, p50 %v, max %v",
		tick, syncLimit, timeout, unsafe, runs, diffs[0].Round(time.Millisecond),
		diffs[len(diffs)/2].Round(time.Millisecond), diffs[len(diffs)-1].Round(time.Millisecond))
}

// cutRun makes one run: a holder on follower f, a waiter on leader l, f
// cut off. It returns the holder's last instant of Err() == nil less the
// instant the waiter's Acquire returned: negative when safe.
func cutRun(t *testing.T, links *peerLinks, l, f *testenv.ZKServer, timeout time.Duration) time.Duration {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	prefix := testPrefix()
	holder, err := zklock.New([]string{f.Addr}, &zklock.Options{Prefix: prefix, SessionTimeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	other, err := zklock.New([]string{l.Addr}, &zklock.Options{Prefix: prefix, SessionTimeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	lease := locktest.Must(t)(holder.Acquire(ctx, "cut"))
	base := time.Now()
	var lastHeld atomic.Int64 // time.Duration since base
	observed := make(chan struct{})
	go func() { // the holder's careful loop: look before each "write"
		defer close(observed)
		for lease.Err() == nil {
			lastHeld.Store(int64(time.Since(base))) // after the look: the latest it can claim
			time.Sleep(100 * time.Microsecond)
		}
	}()
	granted := make(chan time.Duration, 1)
	go func() {
		ol, err := other.Acquire(ctx, "cut")
		if err != nil {
			t.Errorf("other client: %v", err)
			granted <- -1
			return
		}
		granted <- time.Since(base)
		_ = ol.Release(ctx)
	}()
	time.Sleep(timeout / 2) // the waiter queues; the holder's syncs run
	links.isolate(f.ID, true)
	cut := time.Since(base)
	defer links.isolate(f.ID, false)
	g := <-granted
	select {
	case <-observed:
	case <-time.After(30 * time.Second):
		t.Fatalf("the holder still sees its lease held 30s after the cut")
	}
	if g < 0 {
		t.FailNow()
	}
	if err := lease.Err(); !errors.Is(err, dlock.ErrLost) {
		t.Errorf("holder's Err() after the cut = %v, want ErrLost", err)
	}
	held := time.Duration(lastHeld.Load())
	t.Logf("follower %d cut at %v; holder last held at cut+%v, other granted at cut+%v",
		f.ID, cut.Round(time.Millisecond), (held - cut).Round(time.Millisecond), (g - cut).Round(time.Millisecond))
	return held - g
}

// peerLinks are the proxies between an ensemble's servers, one per
// direction and port, so that a test can cut a server off.
type peerLinks struct {
	t     testing.TB
	mu    sync.Mutex
	links []peerLink
}

type peerLink struct {
	from, to int
	p        *proxy
}

// dial is a testenv.ZKOptions.Peer: it starts a proxy to addr.
func (pl *peerLinks) dial(from, to int, _ bool, addr string) (string, error) {
	p, err := listenProxy(addr)
	if err != nil {
		return "", err
	}
	pl.t.Cleanup(p.close)
	pl.mu.Lock()
	pl.links = append(pl.links, peerLink{from, to, p})
	pl.mu.Unlock()
	return p.Addr(), nil
}

// isolate black-holes (on) every link to or from server id, or lets them
// through again (off): then it closes their connections, which lost bytes,
// so that the servers connect afresh.
func (pl *peerLinks) isolate(id int, on bool) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	for _, l := range pl.links {
		if l.from == id || l.to == id {
			l.p.hole.Store(on)
			if !on {
				l.p.drop()
			}
		}
	}
}
