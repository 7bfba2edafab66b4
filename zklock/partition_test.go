package zklock_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/zklock"
)

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
	lease, err := holder.Acquire(ctx, "cut")
	if err != nil {
		t.Fatal(err)
	}
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
	p        *holeProxy
}

// dial is a testenv.ZKOptions.Peer: it starts a proxy to addr.
func (pl *peerLinks) dial(from, to int, _ bool, addr string) (string, error) {
	p, err := startHoleProxy(addr)
	if err != nil {
		return "", err
	}
	pl.t.Cleanup(p.close)
	pl.mu.Lock()
	pl.links = append(pl.links, peerLink{from, to, p})
	pl.mu.Unlock()
	return p.addr(), nil
}

// isolate black-holes (on) every link to or from server id, or lets them
// through again (off): then it closes their connections, which lost bytes,
// so that the servers connect afresh.
func (pl *peerLinks) isolate(id int, on bool) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	for _, l := range pl.links {
		if l.from == id || l.to == id {
			l.p.setHole(on)
			if !on {
				l.p.cut()
			}
		}
	}
}

// holeProxy is a loopback TCP proxy whose links can be black-holed:
// connections stay open, and bytes either way are dropped, as in a
// partition.
type holeProxy struct {
	ln     net.Listener
	target string
	hole   atomic.Bool

	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

func startHoleProxy(target string) (*holeProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &holeProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	go p.serve()
	return p, nil
}

func (p *holeProxy) addr() string { return p.ln.Addr().String() }

func (p *holeProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.DialTimeout("tcp", p.target, time.Second)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c], p.conns[s] = struct{}{}, struct{}{}
		p.mu.Unlock()
		go p.pipe(c, s)
		go p.pipe(s, c)
	}
}

// pipe copies src to dst, dropping what it reads while the hole is on.
func (p *holeProxy) pipe(dst, src net.Conn) {
	defer func() {
		_ = dst.Close()
		_ = src.Close()
		p.mu.Lock()
		delete(p.conns, dst)
		delete(p.conns, src)
		p.mu.Unlock()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.hole.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *holeProxy) setHole(on bool) { p.hole.Store(on) }

// cut closes every current connection.
func (p *holeProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		_ = c.Close()
	}
}

func (p *holeProxy) close() {
	_ = p.ln.Close()
	p.cut()
}
