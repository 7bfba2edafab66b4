package zklock_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/locktest"
	"github.com/dlockgo/dlock/zklock"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.StopSharedZK()
	os.Exit(code)
}

// testPrefix returns a prefix of the test's own, so that tests sharing a
// server never meet.
func testPrefix() string { return "/dlocktest/" + locktest.RandomHex(6) }

// newDriver returns a driver closed when t ends.
func newDriver(t testing.TB, servers []string, prefix string, timeout time.Duration) *zklock.Driver {
	t.Helper()
	d, err := zklock.NewDriver(servers, &zklock.Options{Prefix: prefix, SessionTimeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

// newLocker returns a Locker over newDriver, closed when t ends.
func newLocker(t testing.TB, servers []string, prefix string, timeout time.Duration, opts ...dlock.Option) (*dlock.Locker, *zklock.Driver) {
	t.Helper()
	d := newDriver(t, servers, prefix, timeout)
	return locktest.New(t, d, opts...), d
}

// A fixture is the start of a test: a context that ends after its limit, a
// fresh prefix on the servers, and an admin connection to look at the tree.
type fixture struct {
	t       testing.TB
	ctx     context.Context
	servers []string
	prefix  string
	adm     *admin
}

// newFixture starts a test on the standalone server.
func newFixture(t testing.TB, limit time.Duration) *fixture {
	return newFixtureOn(t, []string{testenv.ZKAddr(t)}, limit)
}

// newFixtureOn starts a test on servers.
func newFixtureOn(t testing.TB, servers []string, limit time.Duration) *fixture {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	t.Cleanup(cancel)
	return &fixture{t: t, ctx: ctx, servers: servers, prefix: testPrefix(), adm: newAdmin(t, servers)}
}

// locker returns a Locker of its own under the fixture's prefix, with a
// session timeout of 5 s.
func (f *fixture) locker() (*dlock.Locker, *zklock.Driver) {
	return newLocker(f.t, f.servers, f.prefix, 5*time.Second)
}

// pair returns two Lockers under the fixture's prefix, of session timeout
// timeout: a, with its driver, and b. With cut set, a reaches the server
// through p, a proxy the test can cut (nil without).
func (f *fixture) pair(timeout time.Duration, cut bool) (p *proxy, a *dlock.Locker, da *zklock.Driver, b *dlock.Locker) {
	servers := f.servers
	if cut {
		p = startProxy(f.t, f.servers[0])
		servers = []string{p.Addr()}
	}
	a, da = newLocker(f.t, servers, f.prefix, timeout)
	b, _ = newLocker(f.t, f.servers, f.prefix, timeout)
	return p, a, da, b
}

// peak counts the holders of a lock, and the most that held it at once.
type peak struct{ cur, max atomic.Int32 }

func (p *peak) enter() {
	n := p.cur.Add(1)
	for m := p.max.Load(); n > m && !p.max.CompareAndSwap(m, n); m = p.max.Load() {
	}
}

func (p *peak) leave() { p.cur.Add(-1) }

// admin is a plain ZooKeeper client for looking at and meddling with the
// tree behind the drivers' backs.
type admin struct {
	t    testing.TB
	conn *zk.Conn
	// layout, when set, is the format of the lock nodes it looks at
	// (default dlock's own).
	layout zklock.Layout
}

func newAdmin(t testing.TB, servers []string) *admin {
	t.Helper()
	return &admin{t: t, conn: connectAs(t, servers, "", "")}
}

// connectAs returns a ZooKeeper client authenticated by digest as
// user:password (unauthenticated when user is empty).
func connectAs(t testing.TB, servers []string, user, password string) *zk.Conn {
	t.Helper()
	c, _, err := zk.Connect(servers, 10*time.Second, zk.WithLogger(log.New(io.Discard, "", 0)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	if user != "" {
		if err := c.AddAuth("digest", []byte(user+":"+password)); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// locks returns the lock nodes under the name's znode, in queue order.
func (a *admin) locks(prefix, name string) []string {
	a.t.Helper()
	// The admin's server may lag behind the one the lockers wrote through
	// (a follower, or even the leader): send a transaction first, as
	// Driver.sync does, so that it has applied their writes.
	_, _ = a.conn.Multi(&zk.CheckVersionRequest{Path: prefix + "/" + name, Version: -1})
	kids, _, err := a.conn.Children(prefix + "/" + name)
	if err == zk.ErrNoNode {
		return nil
	}
	if err != nil {
		a.t.Fatalf("list %s/%s: %v", prefix, name, err)
	}
	if a.layout != "" && a.layout != zklock.LayoutDlock {
		return zklock.LockNodes(a.layout, kids)
	}
	return queued(kids, "-lock#")
}

// queued returns the kids that are dlock's lock nodes (_c_<guid>…#<seq>)
// with marker in their name, in queue order (by sequence number; the tests
// stay far from its wrap-around).
func queued(kids []string, marker string) []string {
	var locks []string
	for _, k := range kids {
		if strings.HasPrefix(k, "_c_") && strings.Contains(k, marker) {
			locks = append(locks, k)
		}
	}
	slices.SortFunc(locks, func(x, y string) int {
		return strings.Compare(x[strings.Index(x, "#"):], y[strings.Index(y, "#"):])
	})
	return locks
}

// takeAway deletes the holder's node, as an operator would.
func (a *admin) takeAway(prefix, name string) {
	a.t.Helper()
	locks := a.locks(prefix, name)
	if len(locks) == 0 {
		a.t.Fatalf("takeAway %q: no lock node", name)
	}
	if err := a.conn.Delete(prefix+"/"+name+"/"+locks[0], -1); err != nil {
		a.t.Fatalf("takeAway %q: %v", name, err)
	}
}

// nodes returns the lock nodes of any kind under the znode dir, in queue
// order (by sequence number; the tests stay far from its wrap-around).
func (a *admin) nodes(dir string) []string {
	a.t.Helper()
	kids, _, err := a.conn.Children(dir)
	if err == zk.ErrNoNode {
		return nil
	}
	if err != nil {
		a.t.Fatalf("list %s: %v", dir, err)
	}
	return queued(kids, "#")
}

// waitLocks waits until the name's znode holds n lock nodes.
func (a *admin) waitLocks(prefix, name string, n int, limit time.Duration) {
	a.t.Helper()
	a.waitCount(fmt.Sprintf("%q", name), n, limit, func() int { return len(a.locks(prefix, name)) })
}

// waitNodes waits until dir holds n lock nodes.
func (a *admin) waitNodes(dir string, n int, limit time.Duration) {
	a.t.Helper()
	a.waitCount(dir, n, limit, func() int { return len(a.nodes(dir)) })
}

// waitCount waits until what holds n lock nodes, as count counts them.
func (a *admin) waitCount(what string, n int, limit time.Duration, count func() int) {
	a.t.Helper()
	deadline := time.Now().Add(limit)
	for {
		got := count()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			a.t.Fatalf("%s has %d lock nodes after %v, want %d", what, got, limit, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// sum adds up f over drivers.
func sum(drivers []*zklock.Driver, f func(*zklock.Driver) int64) (n int64) {
	for _, d := range drivers {
		n += f(d)
	}
	return n
}

// eventually waits until cond holds, failing t after limit.
func eventually(t testing.TB, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	if !locktest.Eventually(limit, cond) {
		t.Fatalf("after %v: %s", limit, what)
	}
}

// proxy is a loopback TCP proxy in front of a ZooKeeper server (or
// between an ensemble's servers), whose connections a test can cut, or
// black-hole: connections stay open, and bytes either way are dropped, as
// in a partition.
type proxy struct {
	ln     net.Listener
	target string
	hole   atomic.Bool

	mu     sync.Mutex
	refuse bool
	conns  map[net.Conn]struct{}
}

// startProxy starts a proxy to target, closed when t ends.
func startProxy(t testing.TB, target string) *proxy {
	t.Helper()
	p, err := listenProxy(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.close)
	return p
}

func listenProxy(target string) (*proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	go p.serve()
	return p, nil
}

func (p *proxy) Addr() string { return p.ln.Addr().String() }

func (p *proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.refuse {
			p.mu.Unlock()
			_ = c.Close() // refused while cut
			continue
		}
		s, err := net.DialTimeout("tcp", p.target, time.Second)
		if err != nil {
			p.mu.Unlock()
			_ = c.Close()
			continue
		}
		p.conns[c], p.conns[s] = struct{}{}, struct{}{}
		p.mu.Unlock()
		go p.pipe(c, s)
		go p.pipe(s, c)
	}
}

// pipe copies src to dst, dropping what it reads while the hole is on.
func (p *proxy) pipe(dst, src net.Conn) {
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

// drop closes every current connection.
func (p *proxy) drop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		_ = c.Close()
	}
}

// Cut drops every connection and refuses new ones until Restore.
func (p *proxy) Cut() {
	p.mu.Lock()
	p.refuse = true
	p.mu.Unlock()
	p.drop()
}

// Restore lets connections through again.
func (p *proxy) Restore() {
	p.mu.Lock()
	p.refuse = false
	p.mu.Unlock()
}

func (p *proxy) close() {
	_ = p.ln.Close()
	p.Cut()
}
