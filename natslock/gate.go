package natslock

import (
	"slices"
	"time"

	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/internal/gate"
)

// gates let one waiting Lock per lock of a driver wait on the server at a
// time (see internal/gate). Without them every waiter holds a KV watch, a
// consumer on the server, and answers every release with a write, so that
// a handoff costs more the more waiters there are (docs/SCALING.md). A
// waiter that gets the lock leaves its watch to the next one, which so
// starts waiting without making a consumer; the last to leave stops it.
type gates = gate.Set[*handover]

// waitGate is one lock's queue of waiters.
type waitGate = gate.Gate[*handover]

// A handover is a watch one waiter leaves to the next, with what it had
// learnt of the keys.
type handover struct {
	w     *kvWatch
	slots []slot
	init  bool
}

// gateKey is r's gate: a lock's modes wait apart.
func gateKey(r driver.Request) string { return r.Mode.String() + "\x00" + r.Name }

// discardHandover stops the watch no waiter is left to take.
func discardHandover(h *handover) {
	if h != nil {
		stopWatch(h.w)
	}
}

// takeHandover returns the watch the last waiter left in g, if it watches
// keys.
func takeHandover(g *waitGate, keys []string) *handover {
	h := g.Take()
	if h != nil && !slices.EqualFunc(h.slots, keys, func(s slot, k string) bool { return s.key == k }) {
		stopWatch(h.w)
		return nil
	}
	return h
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
