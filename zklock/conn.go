package zklock

import (
	"encoding/binary"
	"net"
	"sync"
	"time"
)

// trackedConn is a TCP connection to a ZooKeeper server that watches the
// frames going by, to learn when the ensemble last heard from the session.
//
// ZooKeeper answers a session's requests in the order it sent them, pings
// included; a frame from the server is a reply, except watch notifications
// (xid -1). So each reply answers the oldest request still unanswered, and
// proves that the server received it, no earlier than it was sent. The
// first frame each way is the session handshake, whose reply carries the
// session timeout the server granted.
type trackedConn struct {
	net.Conn
	s *session

	mu      sync.Mutex
	sent    []time.Duration // send times of unanswered requests, oldest first
	first   int             // index of the oldest in sent
	out, in framer
	greeted bool // the handshake's reply was read
}

// Write records the send time of each request frame that starts in p.
func (c *trackedConn) Write(p []byte) (int, error) {
	now := c.s.clock()
	c.mu.Lock()
	c.out.feed(p, 0, func([]byte) { c.sent = append(c.sent, now) })
	c.mu.Unlock()
	return c.Conn.Write(p)
}

// Read matches each reply frame that starts in what it read with the
// oldest unanswered request.
func (c *trackedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.mu.Lock()
		c.in.feed(p[:n], 16, c.reply)
		c.mu.Unlock()
	}
	return n, err
}

// reply handles the first bytes of a frame from the server. c.mu is held.
func (c *trackedConn) reply(head []byte) {
	if !c.greeted {
		// ConnectResponse: protocolVersion int32, timeOut int32 (ms),
		// sessionId int64, passwd.
		c.greeted = true
		sent, ok := c.pop()
		if !ok || len(head) < 16 {
			return
		}
		timeout := time.Duration(int32(binary.BigEndian.Uint32(head[4:8]))) * time.Millisecond
		c.s.greeted(int64(binary.BigEndian.Uint64(head[8:16])), timeout, sent)
		return
	}
	if len(head) >= 4 && int32(binary.BigEndian.Uint32(head)) == -1 {
		return // a watch notification answers no request
	}
	if sent, ok := c.pop(); ok {
		c.s.heardAt(sent)
	}
}

// pop removes and returns the oldest unanswered request's send time.
func (c *trackedConn) pop() (time.Duration, bool) {
	if c.first == len(c.sent) {
		return 0, false
	}
	t := c.sent[c.first]
	c.first++
	if c.first == len(c.sent) {
		c.sent, c.first = c.sent[:0], 0
	}
	return t, true
}

// framer splits a byte stream into ZooKeeper frames (a 4-byte big-endian
// length, then the body) and hands the first bytes of each body to a
// function.
type framer struct {
	size    [4]byte
	nsize   int // bytes of the size read
	left    int // bytes of the body still to come
	head    [16]byte
	nhead   int  // bytes of the head collected
	wanted  int  // head bytes to collect for the current frame
	pending bool // the current frame's head is not delivered yet
}

// feed consumes p. For each frame, onFrame receives the first want bytes
// of its body (fewer if the body is shorter), once they are in.
func (f *framer) feed(p []byte, want int, onFrame func(head []byte)) {
	for len(p) > 0 {
		if f.nsize < 4 {
			k := copy(f.size[f.nsize:], p)
			f.nsize += k
			p = p[k:]
			if f.nsize < 4 {
				return
			}
			f.left = int(binary.BigEndian.Uint32(f.size[:]))
			f.nhead, f.wanted, f.pending = 0, min(want, f.left), true
		}
		if f.pending && f.nhead < f.wanted {
			k := copy(f.head[f.nhead:f.wanted], p)
			f.nhead += k
		}
		if f.pending && f.nhead == f.wanted {
			f.pending = false
			onFrame(f.head[:f.nhead])
		}
		k := min(len(p), f.left)
		f.left -= k
		p = p[k:]
		if f.left == 0 {
			f.nsize = 0
		}
	}
}
