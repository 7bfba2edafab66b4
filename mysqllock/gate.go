package mysqllock

import (
	"context"
	"sync"

	"github.com/dlockgo/dlock/driver"
)

// gates let one waiting Lock per lock name of a driver wait on the server
// at a time; the driver's other waiters for that name queue behind it in
// the process, in order of arrival, and hold no connection. Without them
// every waiter holds a connection of the pool, waiting in GET_LOCK, so
// that a thousand goroutines waiting on one name cost a thousand server
// connections, past the server's max_connections (docs/MYSQL.md). The
// waiter in the slot leaves it once it holds the lock (or gave up), and
// the next one starts its own server-side wait.
type gates struct {
	mu sync.Mutex
	m  map[string]*gate
}

type gate struct {
	gs   *gates
	name string
	slot chan struct{} // full while a waiter is at the server
	refs int           // waiters queued or at the server, under gs.mu
}

// enter waits for name's gate, as long as ctx allows and done (the
// driver's end) is open: it returns the gate, which the caller must
// leave, or ctx's error, or driver.ErrClosed. A ctx ended before the call
// never enters.
func (gs *gates) enter(ctx context.Context, name string, done <-chan struct{}) (*gate, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	gs.mu.Lock()
	if gs.m == nil {
		gs.m = map[string]*gate{}
	}
	g := gs.m[name]
	if g == nil {
		g = &gate{gs: gs, name: name, slot: make(chan struct{}, 1)}
		gs.m[name] = g
	}
	g.refs++
	gs.mu.Unlock()
	// Senders blocked on a channel are served in the order they came.
	select {
	case g.slot <- struct{}{}:
		return g, nil
	case <-ctx.Done():
		g.drop()
		return nil, ctx.Err()
	case <-done:
		g.drop()
		return nil, driver.ErrClosed
	}
}

// leave gives the slot to the next waiter.
func (g *gate) leave() {
	g.drop()
	<-g.slot
}

// drop forgets one waiter; the last one removes the gate.
func (g *gate) drop() {
	gs := g.gs
	gs.mu.Lock()
	defer gs.mu.Unlock()
	if g.refs--; g.refs == 0 {
		delete(gs.m, g.name)
	}
}
