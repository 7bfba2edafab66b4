package natslock

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/dlockgo/dlock/driver"
)

// gates let one waiting Lock per lock of a driver wait on the server at a
// time; the driver's other waiters for that lock queue behind it in the
// process, in order of arrival. Without them every waiter holds a KV
// watch, a consumer on the server, and answers every release with a
// write, so that a handoff costs more the more waiters there are
// (docs/SCALING.md). A waiter that gets the lock leaves its watch to the
// next one, which so starts waiting without making a consumer.
type gates struct {
	mu sync.Mutex
	m  map[string]*gate
}

type gate struct {
	gs   *gates
	k    string
	slot chan struct{} // full while a waiter waits on the server
	refs int           // waiters queued or waiting, under gs.mu
	// left is the watch the last waiter left, for the next; only the
	// waiter in the slot touches it, and the last to leave stops it.
	left *handover
}

// A handover is a watch one waiter leaves to the next, with what it had
// learnt of the keys.
type handover struct {
	w     *kvWatch
	slots []slot
	init  bool
}

// enter waits for r's gate, as long as ctx allows and the driver is
// open; the caller must leave it.
func (gs *gates) enter(ctx context.Context, r driver.Request, closed <-chan struct{}) (*gate, error) {
	k := r.Mode.String() + "\x00" + r.Name
	gs.mu.Lock()
	if gs.m == nil {
		gs.m = map[string]*gate{}
	}
	g := gs.m[k]
	if g == nil {
		g = &gate{gs: gs, k: k, slot: make(chan struct{}, 1)}
		gs.m[k] = g
	}
	g.refs++
	gs.mu.Unlock()
	select {
	case g.slot <- struct{}{}:
		return g, nil
	case <-ctx.Done():
		g.drop()
		return nil, ctx.Err()
	case <-closed:
		g.drop()
		return nil, driver.ErrClosed
	}
}

// take returns the watch the last waiter left, if it watches keys.
func (g *gate) take(keys []string) *handover {
	h := g.left
	g.left = nil
	if h != nil && !slices.EqualFunc(h.slots, keys, func(s slot, k string) bool { return s.key == k }) {
		stopWatch(h.w)
		return nil
	}
	return h
}

// leave gives the slot to the next waiter, with h (nil: none) for it.
func (g *gate) leave(h *handover) {
	g.left = h
	g.drop()
	<-g.slot
}

// drop forgets one waiter; the last one stops the watch left behind.
func (g *gate) drop() {
	gs := g.gs
	gs.mu.Lock()
	defer gs.mu.Unlock()
	if g.refs--; g.refs == 0 {
		delete(gs.m, g.k)
		if g.left != nil {
			stopWatch(g.left.w)
			g.left = nil
		}
	}
}

// handOver is what a waiter granted the lock leaves to the next: its
// watch, and its keys as held until the watch says otherwise (its own
// write is on the way), the backstop at ttl.
func handOver(w *kvWatch, slots []slot, init bool, ttl time.Duration) *handover {
	due := time.Now().Add(ttl + expirySlack)
	for i := range slots {
		slots[i].free, slots[i].due = false, due
	}
	return &handover{w: w, slots: slots, init: init}
}
