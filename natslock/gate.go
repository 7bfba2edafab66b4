package natslock

import (
	"context"
	"sync"

	"github.com/dlockgo/dlock/driver"
)

// gates let one waiting Lock per lock of a driver wait on the server at a
// time; the driver's other waiters for that lock queue behind it in the
// process, in order of arrival. Without them every waiter holds a KV
// watch, a consumer on the server, and answers every release with a
// write, so that a handoff costs more the more waiters there are
// (docs/SCALING.md).
type gates struct {
	mu sync.Mutex
	m  map[string]*gate
}

type gate struct {
	slot chan struct{} // full while a waiter waits on the server
	refs int           // waiters queued or waiting
}

// enter waits for r's gate, as long as ctx allows and the driver is
// open, and returns the function that leaves it.
func (gs *gates) enter(ctx context.Context, r driver.Request, closed <-chan struct{}) (func(), error) {
	k := r.Mode.String() + "\x00" + r.Name
	gs.mu.Lock()
	if gs.m == nil {
		gs.m = map[string]*gate{}
	}
	g := gs.m[k]
	if g == nil {
		g = &gate{slot: make(chan struct{}, 1)}
		gs.m[k] = g
	}
	g.refs++
	gs.mu.Unlock()
	drop := func() {
		gs.mu.Lock()
		if g.refs--; g.refs == 0 {
			delete(gs.m, k)
		}
		gs.mu.Unlock()
	}
	select {
	case g.slot <- struct{}{}:
		return func() { <-g.slot; drop() }, nil
	case <-ctx.Done():
		drop()
		return nil, ctx.Err()
	case <-closed:
		drop()
		return nil, driver.ErrClosed
	}
}
