package pglock

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"
)

// The listener is a driver's one connection LISTENing to the channels of
// its semaphore waiters and election observers, waking them on a
// notification. Dialled on first use, it lives until the driver closes;
// when it fails it redials (backing off), then wakes every subscriber, as
// notifications may have been lost.
type listener struct {
	mu        sync.Mutex
	running   bool
	subs      map[string]map[*sub]struct{} // by channel
	listening map[string]bool              // LISTENed on the current connection
	// interrupt ends the WaitForNotification, to LISTEN to new channels.
	interrupt context.CancelFunc
	kicked    bool
	done      chan struct{} // closed when the goroutine ends
}

// A sub is one subscription to a channel.
type sub struct {
	channel string
	// wake (buffered) gets a value after each notification, and reconnection.
	wake chan struct{}
	// ready is closed once the channel is LISTENed: later notifications reach wake.
	ready chan struct{}
}

// poke wakes s as a notification would.
func (s *sub) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// subscribe follows channel and returns once it is LISTENed.
func (d *Driver) subscribe(ctx context.Context, channel string) (*sub, error) {
	s := &sub{channel: channel, wake: make(chan struct{}, 1), ready: make(chan struct{})}
	l := &d.lis
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil, errClosed
	}
	l.mu.Lock()
	d.mu.Unlock()
	if l.subs == nil {
		l.subs = map[string]map[*sub]struct{}{}
		l.listening = map[string]bool{}
	}
	set := l.subs[channel]
	if set == nil {
		set = map[*sub]struct{}{}
		l.subs[channel] = set
	}
	set[s] = struct{}{}
	if l.listening[channel] {
		close(s.ready)
	} else {
		l.kicked = true // interrupt the listener's wait
		if l.interrupt != nil {
			l.interrupt()
		}
		if !l.running {
			l.running = true
			l.done = make(chan struct{})
			go d.listen()
		}
	}
	l.mu.Unlock()
	select {
	case <-s.ready:
		return s, nil
	case <-ctx.Done():
		d.unsubscribe(s)
		return nil, ctx.Err()
	case <-d.life.Done():
		d.unsubscribe(s)
		return nil, errClosed
	}
}

// unsubscribe ends s. Its channel stays LISTENed till the listener wakes:
// a stray notification costs nothing.
func (d *Driver) unsubscribe(s *sub) {
	l := &d.lis
	l.mu.Lock()
	defer l.mu.Unlock()
	if set := l.subs[s.channel]; set != nil {
		delete(set, s)
		if len(set) == 0 {
			delete(l.subs, s.channel)
		}
	}
}

// wakeLocked wakes channel's subscribers (all for ""); l.mu is held.
func (l *listener) wakeLocked(channel string) {
	for ch, set := range l.subs {
		if channel != "" && ch != channel {
			continue
		}
		for s := range set {
			s.poke()
		}
	}
}

// Bounds of the listener's back-off between failed connections.
const (
	minRedial = 50 * time.Millisecond
	maxRedial = 2 * time.Second
)

// listen is the listener's goroutine.
func (d *Driver) listen() {
	l := &d.lis
	defer close(l.done)
	var c *conn
	defer func() {
		if c != nil {
			c.close()
		}
	}()
	redial := minRedial
	lost := false // the previous connection failed: wake everyone when back
	for {
		if c == nil {
			nc, err := d.dial(d.life)
			if err != nil {
				if !d.sleep(redial) {
					return
				}
				redial = min(2*redial, maxRedial)
				continue
			}
			c, redial = nc, minRedial
			l.mu.Lock()
			clear(l.listening)
			l.mu.Unlock()
		}
		// LISTEN to the new channels and UNLISTEN the abandoned ones.
		l.mu.Lock()
		var sql strings.Builder
		var add, drop []string
		for ch := range l.subs {
			if !l.listening[ch] {
				add = append(add, ch)
				sql.WriteString("LISTEN " + ch + ";")
			}
		}
		for ch := range l.listening {
			if l.subs[ch] == nil {
				drop = append(drop, ch)
				sql.WriteString("UNLISTEN " + ch + ";")
			}
		}
		l.kicked = false
		l.mu.Unlock()
		if sql.Len() > 0 {
			ctx, cancel := context.WithTimeout(d.life, max(d.keepalive, time.Second))
			c.begin(false)
			_, err := c.pg.PgConn().Exec(ctx, sql.String()).ReadAll()
			cancel()
			if err != nil {
				c.close()
				c, lost = nil, true
				if d.isClosed() {
					return
				}
				continue
			}
			l.mu.Lock()
			for _, ch := range add {
				l.listening[ch] = true
				for s := range l.subs[ch] {
					select {
					case <-s.ready:
					default:
						close(s.ready)
					}
				}
			}
			for _, ch := range drop {
				delete(l.listening, ch)
			}
			l.mu.Unlock()
		}
		if lost {
			lost = false
			l.mu.Lock()
			l.wakeLocked("")
			l.mu.Unlock()
		}
		// Wait for a notification, a new subscription or the driver's end.
		ctx, cancel := context.WithCancel(d.life)
		l.mu.Lock()
		if l.kicked {
			l.mu.Unlock()
			cancel()
			continue
		}
		l.interrupt = cancel
		l.mu.Unlock()
		c.begin(false)
		n, err := c.pg.WaitForNotification(ctx)
		l.mu.Lock()
		l.interrupt = nil
		if n != nil {
			l.wakeLocked(n.Channel)
		}
		l.mu.Unlock()
		interrupted := ctx.Err() != nil
		cancel()
		switch {
		case d.isClosed():
			return
		case err == nil, interrupted && !c.pg.IsClosed():
		default:
			c.close()
			c, lost = nil, true
			if errors.Is(err, context.Canceled) && d.isClosed() {
				return
			}
		}
	}
}

// sleep waits for t or the driver's end; false means the driver closed.
func (d *Driver) sleep(t time.Duration) bool {
	select {
	case <-time.After(t):
		return true
	case <-d.life.Done():
		return false
	}
}
