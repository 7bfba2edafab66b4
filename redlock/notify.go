package redlock

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock/driver"
)

// subscribeWait bounds how long the first waiter of a Driver waits for a
// quorum of nodes to confirm the release subscription. A waiter that goes
// ahead sooner could miss a release; it would then retry only at the
// holder's expiry.
const subscribeWait = 250 * time.Millisecond

// Pauses between attempts to reconnect a node's subscription.
const (
	minResubscribe = 10 * time.Millisecond
	maxResubscribe = time.Second
)

// subscriber holds one pub/sub connection per node to the release channel,
// whose messages carry the released name and wake its local waiters. It
// starts when a Lock first has to wait and lasts until Close. One channel
// per prefix, not per name, means subscribing once, confirmed before any
// waiter relies on it; the cost is that every Driver that has waited
// receives every release under the prefix.
type subscriber struct {
	d      *Driver
	ctx    context.Context // ends at close, cutting short a dial in progress
	cancel context.CancelFunc

	mu      sync.Mutex
	started bool
	stopped bool
	subs    []*redis.PubSub
	waiters map[string][]*waiter

	wg          sync.WaitGroup // the listeners
	confirmed   atomic.Int32   // nodes that confirmed the subscription once
	quorumReady chan struct{}  // closed when a quorum has confirmed
	ready       atomic.Bool    // the first waiter is done waiting for it
}

// waiter is one Lock call waiting for a release of name.
type waiter struct {
	name string
	wake chan struct{} // buffered: a wake-up is never lost, and never blocks
}

func (s *subscriber) init(d *Driver) {
	s.d = d
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.waiters = map[string][]*waiter{}
	s.quorumReady = make(chan struct{})
}

// watch registers a waiter for name, starting the subscriptions if this
// is the driver's first wait, and then waiting (once per driver) until a
// quorum of nodes has confirmed them, or subscribeWait.
func (s *subscriber) watch(ctx context.Context, name string) (*waiter, error) {
	w := &waiter{name: name, wake: make(chan struct{}, 1)}
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return nil, driver.ErrClosed
	}
	if !s.started {
		s.start()
	}
	s.waiters[name] = append(s.waiters[name], w)
	s.mu.Unlock()
	if s.ready.Load() {
		return w, nil
	}
	t := time.NewTimer(subscribeWait)
	defer t.Stop()
	select {
	case <-s.quorumReady:
	case <-t.C:
	case <-ctx.Done():
		s.unwatch(w)
		return nil, ctx.Err()
	case <-s.d.done:
		s.unwatch(w)
		return nil, driver.ErrClosed
	}
	s.ready.Store(true)
	return w, nil
}

func (s *subscriber) unwatch(w *waiter) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ws := slices.DeleteFunc(s.waiters[w.name], func(x *waiter) bool { return x == w })
	if len(ws) == 0 {
		delete(s.waiters, w.name)
	} else {
		s.waiters[w.name] = ws
	}
}

// start starts one listener per node; s.mu is held.
func (s *subscriber) start() {
	s.started = true
	for i, c := range s.d.clients {
		ps := c.Subscribe(s.ctx) // connects on first use
		s.subs = append(s.subs, ps)
		s.wg.Add(1)
		go s.listen(i, ps)
	}
}

// listen subscribes node i's connection and dispatches its messages until
// the driver closes. go-redis reconnects and resubscribes after a network
// error on the next receive; listen only paces those attempts.
func (s *subscriber) listen(i int, ps *redis.PubSub) {
	defer s.wg.Done()
	ctx := s.ctx
	_ = ps.Subscribe(ctx, s.d.channel) // on failure, Receive redials and resubscribes
	confirmed := false
	pause := minResubscribe
	for {
		m, err := ps.Receive(ctx)
		if err != nil {
			if s.d.closed.Load() {
				return
			}
			t := time.NewTimer(pause)
			select {
			case <-s.d.done:
				t.Stop()
				return
			case <-t.C:
			}
			pause = min(2*pause, maxResubscribe)
			continue
		}
		pause = minResubscribe
		switch m := m.(type) {
		case *redis.Subscription:
			if m.Kind != "subscribe" {
				continue
			}
			if !confirmed {
				confirmed = true
				if int(s.confirmed.Add(1)) == s.d.quorum {
					close(s.quorumReady)
				}
				continue
			}
			// Resubscribed after a disconnection: releases may have
			// been missed meanwhile, so every waiter checks again.
			s.wakeAll()
		case *redis.Message:
			s.wake(m.Payload)
		}
	}
}

func (s *subscriber) wake(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, w := range s.waiters[name] {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

func (s *subscriber) wakeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ws := range s.waiters {
		for _, w := range ws {
			select {
			case w.wake <- struct{}{}:
			default:
			}
		}
	}
}

// close closes the subscriptions and waits for the listeners to stop.
// d.closed is already set, so a listener whose receive fails returns.
func (s *subscriber) close() {
	s.cancel()
	s.mu.Lock()
	s.stopped = true
	subs := s.subs
	s.mu.Unlock()
	for _, ps := range subs {
		_ = ps.Close()
	}
	s.wg.Wait()
}
