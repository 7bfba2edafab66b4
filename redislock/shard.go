package redislock

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Sharded notifications. On a Redis 7 Cluster a waiter's grant message
// goes by SPUBLISH on a shard channel of its lock's slot,
// "<prefix>{<name>}:g", which only that slot's primary and replicas carry,
// rather than by PUBLISH, which every node of a cluster forwards to every
// other. A Driver subscribes (SSUBSCRIBE) to the channel of each name it
// waits for, once for all its waiting calls of that name, and drops the
// subscription when the last of them returns. The re-check timer covers a
// message that never arrives, as for the driver's own channel.

// shardState says whether a Driver uses sharded notifications.
const (
	shardUnknown int32 = iota
	shardOn
	shardOff
)

// shardChannel is the shard channel of lock name: its hash tag is the
// lock's.
func (d *Driver) shardChannel(name string) string { return d.prefix + "{" + name + "}:g" }

// useShards reports whether grant messages go by SPUBLISH: on a cluster
// client whose servers know SPUBLISH (Redis 7). The answer is asked once.
func (d *Driver) useShards(ctx context.Context) bool {
	switch d.shardState.Load() {
	case shardOn:
		return true
	case shardOff:
		return false
	}
	cc, ok := d.client.(*redis.ClusterClient)
	if !ok {
		d.shardState.Store(shardOff)
		return false
	}
	info, err := cc.Do(ctx, "COMMAND", "INFO", "SPUBLISH").Slice()
	if err != nil {
		return false // ask again on the next wait
	}
	state := shardOff
	if len(info) > 0 && info[0] != nil {
		state = shardOn
	}
	d.shardState.Store(state)
	return state == shardOn
}

// shardSubs are a Driver's shard channel subscriptions, by channel.
type shardSubs struct {
	mu     sync.Mutex
	subs   map[string]*shardSub
	closed bool
	wg     sync.WaitGroup // listeners
}

// shardSub is one shard channel's subscription, shared by the Driver's
// waiting calls of that name.
type shardSub struct {
	refs   int
	ready  chan struct{} // closed once SSUBSCRIBE is first confirmed
	once   sync.Once
	cancel context.CancelFunc
}

// follow subscribes d to the shard channel ch, or joins its subscription,
// and returns the channel closed once the subscription is confirmed and
// the function that leaves it. It reports false once d is closed.
func (s *shardSubs) follow(d *Driver, ch string) (<-chan struct{}, func(), bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, nil, false
	}
	if s.subs == nil {
		s.subs = map[string]*shardSub{}
	}
	sub := s.subs[ch]
	if sub == nil {
		ctx, cancel := context.WithCancel(context.Background())
		sub = &shardSub{ready: make(chan struct{}), cancel: cancel}
		s.subs[ch] = sub
		s.wg.Go(func() { sub.listen(ctx, d, ch) })
	}
	sub.refs++
	leave := func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if sub.refs--; sub.refs == 0 {
			sub.cancel()
			if s.subs[ch] == sub {
				delete(s.subs, ch)
			}
		}
	}
	return sub.ready, leave, true
}

// close ends every subscription and waits for their listeners.
func (s *shardSubs) close() {
	s.mu.Lock()
	s.closed = true
	for _, sub := range s.subs {
		sub.cancel()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// listen keeps the subscription to ch up until ctx ends: it subscribes
// (again after the slot moved to another primary, which unsubscribes
// its clients, or after the connection stopped answering) and routes the
// grant messages to the Driver's waiters.
func (sub *shardSub) listen(ctx context.Context, d *Driver, ch string) {
	cc := d.client.(*redis.ClusterClient)
	for ctx.Err() == nil {
		ps := cc.SSubscribe(ctx, ch)
		stop := context.AfterFunc(ctx, func() { _ = ps.Close() }) // unblocks the read
		receive(ctx, ps, func(msg any) bool {
			switch m := msg.(type) {
			case *redis.Message:
				d.sub.route(m.Payload, time.Now())
			case *redis.Subscription:
				switch m.Kind {
				case "ssubscribe":
					sub.once.Do(func() { close(sub.ready) })
				case "sunsubscribe":
					return false // the slot moved: subscribe where it is now
				}
			}
			return true
		})
		stop()
		_ = ps.Close()
		if !sleep(ctx, 20*time.Millisecond) {
			return
		}
	}
}
