package memlock

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/dlockgo/dlock/driver"
)

// An observer follows an election for Observe, on a channel of one value.
type observer struct {
	d    *Driver
	name string
	ch   chan driver.LeaderInfo // buffered 1

	// sent: last put on ch; have: last taken, if taken. Guarded by s.mu.
	sent   driver.LeaderInfo
	have   driver.LeaderInfo
	taken  bool
	stop   func() bool // stops the context.AfterFunc that closes ch
	closed bool
}

// Leader implements driver.Elector.
func (d *Driver) Leader(_ context.Context, name string) (driver.LeaderInfo, error) {
	s := d.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if d.closed {
		return driver.LeaderInfo{}, driver.ErrClosed
	}
	s.renew(name)
	return s.leader(name), nil
}

// renew settles the entry of election name; s.mu is held.
func (s *Store) renew(name string) {
	if e := s.locks[key{kindElection, name}]; e != nil {
		s.settle(e, time.Now())
	}
}

// leader returns the leader of election name (see renew); s.mu is held.
func (s *Store) leader(name string) driver.LeaderInfo {
	if e := s.locks[key{kindElection, name}]; e != nil && len(e.holders) > 0 {
		return driver.LeaderInfo{Value: e.holders[0].value, Token: e.holders[0].token}
	}
	return driver.LeaderInfo{}
}

// Observe implements driver.Elector. The store tells observers of every
// change as it makes it (see settle), the entry's timer of a leader's
// expiry. No goroutine runs for an observer: a context.AfterFunc or Close
// closes the channel.
func (d *Driver) Observe(ctx context.Context, name string) (<-chan driver.LeaderInfo, error) {
	s := d.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if d.closed {
		return nil, fmt.Errorf("observe %q: %w", name, driver.ErrClosed)
	}
	s.renew(name)
	o := &observer{d: d, name: name, ch: make(chan driver.LeaderInfo, 1)}
	o.sent = s.leader(name)
	o.ch <- o.sent
	s.observers[name] = append(s.observers[name], o)
	d.observers[o] = struct{}{}
	s.renew(name) // arms the expiry timer, now that someone observes
	o.stop = context.AfterFunc(ctx, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.dropObserver(o)
	})
	return o.ch, nil
}

// notify offers election name's leader to its observers; s.mu is held.
func (s *Store) notify(name string) {
	obs := s.observers[name]
	if len(obs) == 0 {
		return
	}
	info := s.leader(name)
	for _, o := range obs {
		o.offer(info)
	}
}

// offer puts info on the channel, replacing a value not taken, unless the
// reader has it or will: the latest leader, never one twice in a row.
// s.mu is held.
func (o *observer) offer(info driver.LeaderInfo) {
	if info == o.sent {
		return // on the channel, or already taken
	}
	select {
	case <-o.ch: // the reader never saw o.sent
	default:
		o.have, o.taken = o.sent, true
	}
	o.sent = o.have
	if o.taken && info == o.have {
		return // the reader's latest value is current again
	}
	o.ch <- info
	o.sent = info
}

// dropObserver closes o's channel and forgets it, once; s.mu is held.
func (s *Store) dropObserver(o *observer) {
	if o.closed {
		return
	}
	o.closed = true
	if o.stop != nil {
		o.stop()
	}
	s.observers[o.name] = slices.DeleteFunc(s.observers[o.name], func(x *observer) bool { return x == o })
	if len(s.observers[o.name]) == 0 {
		delete(s.observers, o.name)
	}
	delete(o.d.observers, o)
	close(o.ch)
}
