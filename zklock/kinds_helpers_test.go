package zklock_test

import (
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/dlockgo/dlock/locktest"
	"github.com/dlockgo/dlock/zklock"
)

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

// waitNodes waits until dir holds n lock nodes.
func (a *admin) waitNodes(dir string, n int, limit time.Duration) {
	a.t.Helper()
	deadline := time.Now().Add(limit)
	for {
		got := len(a.nodes(dir))
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			a.t.Fatalf("%s has %d lock nodes after %v, want %d", dir, got, limit, n)
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
