package zklock_test

import (
	"io"
	"log"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
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
	c, _, err := zk.Connect(servers, 10*time.Second, zk.WithLogger(log.New(io.Discard, "", 0)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return &admin{t: t, conn: c}
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

// waitLocks waits until the name's znode holds n lock nodes.
func (a *admin) waitLocks(prefix, name string, n int, limit time.Duration) {
	a.t.Helper()
	deadline := time.Now().Add(limit)
	for {
		got := len(a.locks(prefix, name))
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			a.t.Fatalf("%q has %d lock nodes after %v, want %d", name, got, limit, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// proxy is a loopback TCP proxy in front of a ZooKeeper server, whose
// connections a test can cut.
type proxy struct {
	t      testing.TB
	ln     net.Listener
	target string

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]struct{}
}

func startProxy(t testing.TB, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{t: t, ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	go p.serve()
	t.Cleanup(func() {
		_ = ln.Close()
		p.Cut()
	})
	return p
}

func (p *proxy) Addr() string { return p.ln.Addr().String() }

func (p *proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.cut {
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

func (p *proxy) pipe(dst, src net.Conn) {
	_, _ = io.Copy(dst, src)
	_ = dst.Close()
	_ = src.Close()
}

// Cut drops every connection and refuses new ones until Restore.
func (p *proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		_ = c.Close()
	}
	clear(p.conns)
}

// Restore lets connections through again.
func (p *proxy) Restore() {
	p.mu.Lock()
	p.cut = false
	p.mu.Unlock()
}
