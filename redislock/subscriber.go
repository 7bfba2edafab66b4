package redislock

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Subscriptions. A Driver subscribes to each channel once, for all its
// callers, with one goroutine that reads it (see Waiting and Cluster in
// docs/REDIS.md). A grant never arriving is not fatal: waiters re-check on
// a timer.

// pingInterval is how long a subscription may stay silent before its
// listener pings the server; a ping left unanswered for as long again
// means the connection is dead, and the listener subscribes afresh.
const pingInterval = 5 * time.Second

var errOwnerWaiting = errors.New("redislock: this owner is already waiting")

// grantMsg is a handoff addressed to one waiting Lock call.
type grantMsg struct {
	token uint64
	at    time.Time // when the message arrived
}

// waiters routes grant messages to a Driver's waiting Lock calls by owner.
type waiters struct {
	mu sync.Mutex
	by map[string]chan grantMsg
}

// register returns the channel on which the grant for owner will arrive.
func (w *waiters) register(owner string) (chan grantMsg, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, dup := w.by[owner]; dup {
		return nil, errOwnerWaiting
	}
	if w.by == nil {
		w.by = map[string]chan grantMsg{}
	}
	ch := grantChans.Get().(chan grantMsg)
	w.by[owner] = ch
	return ch, nil
}

// unregister ends owner's wait. Its channel is emptied and reused: route
// sends under mu, so once owner is unregistered nothing more arrives on
// it, and a grant meant for one call never reaches another.
func (w *waiters) unregister(owner string) {
	w.mu.Lock()
	ch := w.by[owner]
	delete(w.by, owner)
	w.mu.Unlock()
	if ch != nil {
		select {
		case <-ch:
		default:
		}
		grantChans.Put(ch)
	}
}

// grantChans holds the channels of finished waits, for register, which
// every Lock call makes.
var grantChans = sync.Pool{New: func() any { return make(chan grantMsg, 1) }}

// route delivers a grant message "<token> <owner> <name>" to its waiter,
// if it still waits. Names hold no spaces; owners are split off from both
// ends so that any owner value routes.
func (w *waiters) route(payload string, at time.Time) {
	i := strings.IndexByte(payload, ' ')
	j := strings.LastIndexByte(payload, ' ')
	if i < 0 || j <= i {
		return
	}
	token, err := strconv.ParseUint(payload[:i], 10, 64)
	if err != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if ch := w.by[payload[i+1:j]]; ch != nil {
		select {
		case ch <- grantMsg{token: token, at: at}:
		default: // an older grant is unread; the waiter re-checks anyway
		}
	}
}

// subscriptions are a Driver's subscriptions, by channel.
type subscriptions struct {
	mu     sync.Mutex
	subs   map[string]*subscription
	closed bool
	wg     sync.WaitGroup // listeners
}

// subscription is one channel's, shared by the Driver's callers of it.
type subscription struct {
	ready   chan struct{} // closed once the subscription is first confirmed
	once    sync.Once
	cancel  context.CancelFunc
	signals map[chan struct{}]struct{} // the followers' (the last to leave ends it); guarded by subscriptions.mu
}

// follower is one caller's share of a subscription.
type follower struct {
	ready <-chan struct{} // closed once the subscription is first confirmed
	// signal gets a signal at each message and each confirmation of the
	// subscription (first, and after a reconnection: messages were lost).
	signal <-chan struct{}
	leave  func() // ends the share; the last to leave ends the subscription
}

// follow subscribes d to ch (by SSUBSCRIBE when shard), or joins its
// subscription; each message on it goes to onMessage, if not nil. It
// reports false once d is closed.
func (s *subscriptions) follow(d *Driver, ch string, shard bool, onMessage func(string, time.Time)) (follower, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return follower{}, false
	}
	if s.subs == nil {
		s.subs = map[string]*subscription{}
	}
	sub := s.subs[ch]
	if sub == nil {
		ctx, cancel := context.WithCancel(context.Background())
		sub = &subscription{ready: make(chan struct{}), cancel: cancel, signals: map[chan struct{}]struct{}{}}
		s.subs[ch] = sub
		s.wg.Go(func() { s.listen(ctx, d, sub, ch, shard, onMessage) })
	}
	signal := make(chan struct{}, 1)
	sub.signals[signal] = struct{}{}
	leave := func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(sub.signals, signal)
		if len(sub.signals) == 0 {
			sub.cancel()
			if s.subs[ch] == sub {
				delete(s.subs, ch)
			}
		}
	}
	return follower{ready: sub.ready, signal: signal, leave: leave}, true
}

// signal signals every follower of sub, without blocking: a signal
// already pending covers this one.
func (s *subscriptions) signal(sub *subscription) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for ch := range sub.signals {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// close ends every subscription and waits for their listeners.
func (s *subscriptions) close() {
	s.mu.Lock()
	s.closed = true
	for _, sub := range s.subs {
		sub.cancel()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// listen keeps the subscription to ch up until ctx ends. go-redis
// resubscribes after network errors itself; listen does so after a
// connection stopped answering, and after a Cluster unsubscribed it from a
// shard channel (the slot moved to another primary).
func (s *subscriptions) listen(ctx context.Context, d *Driver, sub *subscription, ch string, shard bool,
	onMessage func(string, time.Time)) {
	for ctx.Err() == nil {
		var ps *redis.PubSub
		if shard {
			ps = d.client.SSubscribe(ctx, ch)
		} else {
			ps = d.client.Subscribe(ctx, ch)
		}
		stop := context.AfterFunc(ctx, func() { _ = ps.Close() }) // unblocks the read
		receive(ctx, ps, func(msg any) bool {
			switch m := msg.(type) {
			case *redis.Message:
				if onMessage != nil {
					onMessage(m.Payload, time.Now())
				}
			case *redis.Subscription:
				switch m.Kind {
				case "subscribe", "ssubscribe":
					sub.once.Do(func() { close(sub.ready) })
				case "sunsubscribe":
					return false
				default:
					return true
				}
			}
			s.signal(sub)
			return true
		})
		stop()
		_ = ps.Close()
		if !sleep(ctx, 20*time.Millisecond) {
			return
		}
	}
}

// receive passes what ps receives to handle until ctx ends, handle
// returns false, or the connection stops answering pings (go-redis
// reconnects after other errors by itself).
func receive(ctx context.Context, ps *redis.PubSub, handle func(msg any) bool) {
	pinged := false
	failures := 0
	for ctx.Err() == nil {
		msg, err := ps.ReceiveTimeout(ctx, pingInterval)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
				if pinged {
					return // no answer to the last ping: start afresh
				}
				pinged = true
				_ = ps.Ping(ctx)
				continue
			}
			// The server is unreachable; the next receive reconnects.
			failures++
			if !sleep(ctx, min(time.Duration(failures)*50*time.Millisecond, time.Second)) {
				return
			}
			continue
		}
		failures, pinged = 0, false
		if !handle(msg) {
			return
		}
	}
}

// shardState says whether a Driver uses shard channels.
const (
	shardUnknown int32 = iota
	shardOn
	shardOff
)

// useShards reports whether the Driver's grants and election changes go
// by shard channels: on a Cluster client whose servers know SPUBLISH
// (Redis 7). Every Driver on one cluster answers alike. The server is
// asked once; a failure to ask is returned, and asked again next time.
func (d *Driver) useShards(ctx context.Context) (bool, error) {
	switch d.shardState.Load() {
	case shardOn:
		return true, nil
	case shardOff:
		return false, nil
	}
	if _, ok := d.client.(*redis.ClusterClient); !ok {
		d.shardState.Store(shardOff)
		return false, nil
	}
	info, err := d.client.Do(ctx, "COMMAND", "INFO", "SPUBLISH").Slice()
	if err != nil {
		return false, err
	}
	state := shardOff
	if len(info) > 0 && info[0] != nil {
		state = shardOn
	}
	d.shardState.Store(state)
	return state == shardOn, nil
}

// subscribeOwn subscribes d to its own channel, once, and returns the
// channel closed once the subscription is confirmed; it reports false
// once d is closed.
func (d *Driver) subscribeOwn() (<-chan struct{}, bool) {
	d.ownOnce.Do(func() {
		if f, ok := d.subs.follow(d, d.channel, false, d.waiters.route); ok {
			d.ownReady = f.ready
		}
	})
	return d.ownReady, d.ownReady != nil
}

// sleep waits for d or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
