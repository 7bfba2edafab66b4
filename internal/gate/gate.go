// Package gate lets one waiting Lock per lock of a driver wait on the
// store at a time; the driver's other waiters for that lock queue behind
// it in the process, in order of arrival. A backend whose waiters are
// woken together by a release and then each ask the store (a KV watch per
// waiter, a retry on every node per waiter) would otherwise pay more per
// handoff the more waiters a process has; behind a gate a handoff costs
// the same however many there are.
//
// The zero Set is ready to use. A Set is safe for concurrent use and must
// not be copied.
package gate

import (
	"context"
	"sync"

	"github.com/dlockgo/dlock/driver"
)

// Set is the gates of one driver, one per lock key, made on first use
// and dropped when nobody waits at them.
type Set struct {
	mu sync.Mutex
	m  map[string]*gate
}

type gate struct {
	slot chan struct{} // full while a waiter is through
	refs int           // waiters queued or through
}

// Enter waits for key's gate, as long as ctx allows and closed is open,
// and returns the function that leaves it, to be called once. It returns
// ctx's error when ctx ends first and driver.ErrClosed when closed is
// closed first.
func (s *Set) Enter(ctx context.Context, key string, closed <-chan struct{}) (leave func(), err error) {
	s.mu.Lock()
	if s.m == nil {
		s.m = map[string]*gate{}
	}
	g := s.m[key]
	if g == nil {
		g = &gate{slot: make(chan struct{}, 1)}
		s.m[key] = g
	}
	g.refs++
	s.mu.Unlock()
	drop := func() {
		s.mu.Lock()
		if g.refs--; g.refs == 0 {
			delete(s.m, key)
		}
		s.mu.Unlock()
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

// Len returns how many keys have waiters queued or through, for tests.
func (s *Set) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}
