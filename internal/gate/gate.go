// Package gate lets one waiter per lock of a driver wait on the server at
// a time: the driver's other waiters for that lock queue behind it in the
// process, in order of arrival, and cost the server nothing. A waiter
// whose context ends leaves the queue at once.
package gate

import (
	"context"
	"sync"

	"github.com/dlockgo/dlock/driver"
)

// Set is a driver's gates, one per lock key while it has waiters. T is
// what a waiter may leave to the next (natslock: its watch). The zero
// value is ready for use. A Set is safe for concurrent use; it must not
// be copied.
type Set[T any] struct {
	// Discard, if not nil, is given what the last waiter left when no
	// waiter remains to take it (the zero T when it left nothing). It is
	// called with the Set's lock held.
	Discard func(T)

	mu   sync.Mutex
	m    map[string]*Gate[T]
	free sync.Pool // gates no waiter holds, so that an uncontended Lock allocates none
}

// Gate is one key's queue. Only the waiter in its slot (between Enter and
// Leave) may call Take and Leave, and no one may use the gate after
// leaving it: a gate with no waiters is reused for another key.
type Gate[T any] struct {
	s    *Set[T]
	key  string
	slot chan struct{} // full while a waiter is at the server
	refs int           // waiters queued or at the server, under s.mu
	left T             // what the last waiter left for the next
}

// Enter waits for key's gate, as long as ctx allows and done (the
// driver's end) is open: it returns the gate, which the caller must
// leave, or ctx's error, or driver.ErrClosed. A ctx ended before the call
// never enters.
func (s *Set[T]) Enter(ctx context.Context, key string, done <-chan struct{}) (*Gate[T], error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	if s.m == nil {
		s.m = map[string]*Gate[T]{}
	}
	g := s.m[key]
	if g == nil {
		g, _ = s.free.Get().(*Gate[T])
		if g == nil {
			g = &Gate[T]{s: s, slot: make(chan struct{}, 1)}
		}
		g.key = key
		s.m[key] = g
	}
	g.refs++
	s.mu.Unlock()
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

// Take returns what the last waiter left, and forgets it.
func (g *Gate[T]) Take() T {
	v := g.left
	var zero T
	g.left = zero
	return v
}

// Leave gives the slot to the next waiter, with v for it.
func (g *Gate[T]) Leave(v T) {
	g.left = v
	<-g.slot
	g.drop()
}

// drop forgets one waiter; the last one removes the gate, discards what
// was left in it and frees it for reuse. The slot is empty then: the
// waiter in it counts until it has emptied it.
func (g *Gate[T]) drop() {
	s := g.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if g.refs--; g.refs > 0 {
		return
	}
	delete(s.m, g.key)
	if s.Discard != nil {
		s.Discard(g.left)
	}
	var zero T
	g.left = zero
	s.free.Put(g)
}
