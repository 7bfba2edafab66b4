package redislock

import (
	"context"
	"errors"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// pingInterval is how long the subscription may stay silent before the
// listener pings the server; a ping left unanswered for as long again
// means the connection is dead, and the listener subscribes afresh.
const pingInterval = 5 * time.Second

var errOwnerWaiting = errors.New("redislock: this owner is already waiting")

// grantMsg is a handoff addressed to one waiting Lock call.
type grantMsg struct {
	token uint64
	at    time.Time // when the message arrived
}

// subscriber is a Driver's one pub/sub subscription, shared by all its
// waiting Lock calls. It is started by the first Lock. Its listener
// goroutine reads the driver's channel and routes each grant message to
// the waiting call whose owner it names. A grant that never arrives
// (subscription down, message lost) is not fatal: waiters re-check on a
// timer.
type subscriber struct {
	d *Driver

	ready     chan struct{} // closed once the first SUBSCRIBE is confirmed
	readyOnce sync.Once

	mu      sync.Mutex
	started bool
	closed  bool
	ps      *redis.PubSub // the current subscription, if any
	cancel  context.CancelFunc
	stopped chan struct{} // closed when the listener returns

	wmu     sync.Mutex
	waiters map[string]chan grantMsg // by owner

	// topics are the channels besides the driver's that observers of
	// elections follow, with their observers; guarded by mu, which also
	// orders the SUBSCRIBE and UNSUBSCRIBE commands sent for them.
	topics map[string]map[chan struct{}]struct{}
}

func (s *subscriber) init(d *Driver) {
	s.d = d
	s.ready = make(chan struct{})
	s.stopped = make(chan struct{})
	s.waiters = map[string]chan grantMsg{}
	s.topics = map[string]map[chan struct{}]struct{}{}
}

// isReady reports whether the subscription has been confirmed.
func (s *subscriber) isReady() bool {
	select {
	case <-s.ready:
		return true
	default:
		return false
	}
}

// start starts the listener unless it runs already; it reports false once
// the subscriber is closed.
func (s *subscriber) start() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	if !s.started {
		s.started = true
		var ctx context.Context
		ctx, s.cancel = context.WithCancel(context.Background())
		go s.listen(ctx)
	}
	return true
}

// register returns the channel on which the grant for owner will arrive.
func (s *subscriber) register(owner string) (chan grantMsg, error) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if _, dup := s.waiters[owner]; dup {
		return nil, errOwnerWaiting
	}
	ch := grantChans.Get().(chan grantMsg)
	s.waiters[owner] = ch
	return ch, nil
}

// unregister ends owner's wait. Its channel is emptied and reused: route
// sends under wmu, so once owner is unregistered nothing more arrives on
// it, and a grant meant for one call never reaches another.
func (s *subscriber) unregister(owner string) {
	s.wmu.Lock()
	ch := s.waiters[owner]
	delete(s.waiters, owner)
	s.wmu.Unlock()
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
func (s *subscriber) route(payload string, at time.Time) {
	i := strings.IndexByte(payload, ' ')
	j := strings.LastIndexByte(payload, ' ')
	if i < 0 || j <= i {
		return
	}
	token, err := strconv.ParseUint(payload[:i], 10, 64)
	if err != nil {
		return
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if ch := s.waiters[payload[i+1:j]]; ch != nil {
		select {
		case ch <- grantMsg{token: token, at: at}:
		default: // an older grant is unread; the waiter re-checks anyway
		}
	}
}

// listen keeps the subscription up until the subscriber closes. go-redis
// reconnects and re-subscribes a PubSub after network errors by itself; a
// connection that silently stopped answering is replaced here.
func (s *subscriber) listen(ctx context.Context) {
	defer close(s.stopped)
	for ctx.Err() == nil {
		s.mu.Lock()
		channels := make([]string, 0, 1+len(s.topics))
		channels = append(channels, s.d.channel)
		for c := range s.topics {
			channels = append(channels, c)
		}
		s.mu.Unlock()
		ps := s.d.client.Subscribe(ctx, channels...)
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			_ = ps.Close()
			return
		}
		s.ps = ps
		// Topics followed, or left, since the snapshot above.
		var missing, stale []string
		for c := range s.topics {
			if !slices.Contains(channels, c) {
				missing = append(missing, c)
			}
		}
		for _, c := range channels[1:] {
			if _, ok := s.topics[c]; !ok {
				stale = append(stale, c)
			}
		}
		// go-redis remembers these and resends them on reconnection, even
		// if sending them fails now.
		if len(missing) > 0 {
			_ = ps.Subscribe(ctx, missing...)
		}
		if len(stale) > 0 {
			_ = ps.Unsubscribe(ctx, stale...)
		}
		s.mu.Unlock()

		s.receive(ctx, ps)

		s.mu.Lock()
		s.ps = nil
		s.mu.Unlock()
		_ = ps.Close()
	}
}

// receive reads ps until ctx ends or the connection stops answering pings.
func (s *subscriber) receive(ctx context.Context, ps *redis.PubSub) {
	receive(ctx, ps, func(msg any) bool {
		switch m := msg.(type) {
		case *redis.Message:
			if m.Channel == s.d.channel {
				s.route(m.Payload, time.Now())
			} else {
				s.notify(m.Channel)
			}
		case *redis.Subscription:
			if m.Kind != "subscribe" {
				break
			}
			if m.Channel == s.d.channel {
				s.readyOnce.Do(func() { close(s.ready) })
			} else {
				// Subscribed, or subscribed again after a reconnection:
				// what changed meanwhile was not announced to us.
				s.notify(m.Channel)
			}
		}
		return true
	})
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
			if isTimeout(err) {
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

// follow subscribes to topic (unless it is followed already) and returns
// a channel that gets a signal at each message on it, and each time the
// subscription to it is confirmed (first, and after reconnections). It
// starts the listener if need be; it reports false once the subscriber
// is closed. unfollow undoes it.
func (s *subscriber) follow(topic string) (chan struct{}, bool) {
	if !s.start() {
		return nil, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, false
	}
	ch := make(chan struct{}, 1)
	obs := s.topics[topic]
	if obs == nil {
		obs = map[chan struct{}]struct{}{}
		s.topics[topic] = obs
		if s.ps != nil {
			// The listener subscribes to every topic when it (re)creates
			// its subscription; until then this one waits in topics.
			_ = s.ps.Subscribe(context.Background(), topic)
		}
	}
	obs[ch] = struct{}{}
	return ch, true
}

// unfollow drops a channel returned by follow, and unsubscribes from
// topic when nobody follows it any more.
func (s *subscriber) unfollow(topic string, ch chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	obs := s.topics[topic]
	delete(obs, ch)
	if len(obs) == 0 && obs != nil {
		delete(s.topics, topic)
		if s.ps != nil && !s.closed {
			_ = s.ps.Unsubscribe(context.Background(), topic)
		}
	}
}

// notify signals every follower of topic, without blocking: a signal
// already pending covers this one.
func (s *subscriber) notify(topic string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for ch := range s.topics[topic] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// close stops the listener and waits for it.
func (s *subscriber) close() {
	s.mu.Lock()
	s.closed = true
	started := s.started
	if s.cancel != nil {
		s.cancel()
	}
	if s.ps != nil {
		_ = s.ps.Close() // unblocks the listener's read
	}
	s.mu.Unlock()
	if started {
		<-s.stopped
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
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
