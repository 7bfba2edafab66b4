package zklock

import (
	"encoding/binary"
	"fmt"
	"net"
	"slices"
	"sync"
	"time"
)

// trackedConn is a TCP connection to a ZooKeeper server that watches the
// frames going by, to learn what the ensemble's leader knows of the
// session (see confirmedAt for why this measures validity).
//
// ZooKeeper answers a session's requests in the order they were sent,
// pings included, and every frame from the server but a watch notification
// (xid -1) is a reply: each answers the oldest request unanswered, and
// proves that the server received it, no earlier than it was sent. The
// first frame each way is the handshake, whose reply carries the granted
// session timeout.
//
// What it knows of the server's link to the leader (cands, reported) is
// per connection: the argument chains requests through one server, and a
// server that loses its leader closes its clients' connections.
type trackedConn struct {
	net.Conn
	s *session

	mu      sync.Mutex
	sent    []request // unanswered requests, oldest first
	first   int       // index of the oldest in sent
	out, in framer
	wrote   bool // the handshake request went out
	greeted bool // the handshake's reply was read

	// cands are recent replies, not yet older than the report gap; ready
	// is the send time of the newest reply that is (-1 for none).
	cands []candidate
	ready time.Duration
	// reported is the latest send time that a quorum request answered on
	// this connection has carried to the leader in a server's ping reply
	// (see confirmedAt); -1 for none.
	reported time.Duration
}

// request is a request frame awaiting its reply.
type request struct {
	sent  time.Duration // when it was written (session clock)
	xid   int32
	hello bool // the handshake, which has no header
	// For a quorum request (else -1), the connection's ready and reported
	// when it was sent: its reply makes carries reported, and proves the
	// leader touched the session after proves.
	carries, proves time.Duration
}

// candidate is a successful reply: the server received the request, and
// so touched the session in its own table, between sent and got.
type candidate struct{ sent, got time.Duration }

// ZooKeeper opcodes (zookeeper.jute) that only the leader answers: writes,
// which a follower answers once the leader committed them, and sync,
// which it answers once the leader sent it a SYNC.
const (
	opCreate          = 1
	opDelete          = 2
	opSetData         = 5
	opSetACL          = 7
	opSync            = 9
	opMulti           = 14
	opCreate2         = 15
	opCreateContainer = 19
	opCreateTTL       = 21
	opSetWatches      = 101
)

// quorumOp reports whether a reply to op means the leader answered it.
func quorumOp(op int32) bool {
	switch op {
	case opCreate, opDelete, opSetData, opSetACL, opSync, opMulti, opCreate2, opCreateContainer, opCreateTTL:
		return true
	}
	return false
}

// The zk.Conn stores each reply's zxid in a field it also reads, with no
// lock, while it sets a session's watches again after a reconnection: a
// data race in go-zookeeper v1.0.4 (samuel/go-zookeeper#260) that the race
// detector reports. So the connection records the newest zxid itself
// (session.zxid) and zeroes it in every reply header but the handshake's
// (the zk.Conn stores only positive ones). Write puts it in the two
// requests that carry it: the handshake's LastZxidSeen (so that the
// session reconnects only to a server that has seen what it saw) and
// SetWatches' RelativeZxid (so that the server reports the changes since
// then, not every change since the tree began).

// zxidOffset is where the zxid lies in a reply body: after the xid.
const zxidOffset = 4

// newTrackedConn wraps c for session s.
func newTrackedConn(c net.Conn, s *session) *trackedConn {
	return &trackedConn{Conn: c, s: s, ready: -1, reported: -1, in: framer{zeroZxid: true}}
}

// Write records the send time and header of each request frame in p, and
// fills in the session's zxid where the request carries it (see above).
func (c *trackedConn) Write(p []byte) (int, error) {
	now := c.s.clock()
	c.mu.Lock()
	hello := !c.wrote
	c.out.feed(p, 8, func(head []byte) { c.request(head, now) })
	c.mu.Unlock()
	if q := c.withZxid(p, hello); q != nil {
		return c.Conn.Write(q)
	}
	return c.Conn.Write(p)
}

// withZxid returns a copy of p with the session's zxid written in when p
// is a handshake or a SetWatches request, else nil. The zk.Conn writes
// each request whole, in one Write.
func (c *trackedConn) withZxid(p []byte, hello bool) []byte {
	zxid := c.s.zxid.Load()
	if zxid <= 0 || len(p) < 4 || int(binary.BigEndian.Uint32(p)) != len(p)-4 {
		return nil
	}
	var at int
	switch {
	case hello:
		at = 4 + 4 // ConnectRequest: protocolVersion int32, lastZxidSeen int64
	case len(p) >= 4+16 && int32(binary.BigEndian.Uint32(p[8:])) == opSetWatches:
		at = 4 + 8 // RequestHeader (xid, type), then relativeZxid int64
	default:
		return nil
	}
	if len(p) < at+8 {
		return nil
	}
	q := slices.Clone(p)
	binary.BigEndian.PutUint64(q[at:], uint64(zxid))
	return q
}

// request records a request frame whose body starts with head. c.mu is
// held.
func (c *trackedConn) request(head []byte, now time.Duration) {
	r := request{sent: now, carries: -1, proves: -1}
	switch {
	case !c.wrote:
		c.wrote, r.hello = true, true
	case len(head) == 8:
		r.xid = int32(binary.BigEndian.Uint32(head))
		if quorumOp(int32(binary.BigEndian.Uint32(head[4:]))) {
			r.carries, r.proves = c.readyAt(now), c.reported
		}
	}
	c.sent = append(c.sent, r)
}

// Read matches each reply frame that starts in what it read with the
// oldest unanswered request.
func (c *trackedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		now := c.s.clock()
		c.mu.Lock()
		c.in.feed(p[:n], 16, func(head []byte) { c.reply(head, now) })
		c.mu.Unlock()
	}
	if err != nil {
		c.mu.Lock()
		greeted := c.greeted
		c.mu.Unlock()
		if !greeted {
			// Failed before the handshake's reply (a TLS server refusing
			// the client's certificate says so only now): the cause for
			// the session's errors.
			e := fmt.Errorf("zklock: connection to %s: %w", c.RemoteAddr(), err)
			c.s.dialErr.Store(&e)
		}
	}
	return n, err
}

// reply handles the first bytes of a frame from the server, read at now.
// c.mu is held.
func (c *trackedConn) reply(head []byte, now time.Duration) {
	if !c.greeted {
		// ConnectResponse: protocolVersion int32, timeOut int32 (ms),
		// sessionId int64, passwd.
		c.greeted = true
		r, ok := c.pop()
		if !ok || !r.hello || len(head) < 16 {
			return
		}
		timeout := time.Duration(int32(binary.BigEndian.Uint32(head[4:8]))) * time.Millisecond
		c.s.greeted(int64(binary.BigEndian.Uint64(head[8:16])), timeout, r.sent)
		return
	}
	if len(head) < 16 {
		return
	}
	// ReplyHeader: xid int32, zxid int64, err int32.
	xid := int32(binary.BigEndian.Uint32(head))
	if xid == -1 {
		return // a watch notification answers no request
	}
	if zxid := int64(binary.BigEndian.Uint64(head[zxidOffset:])); xid >= 0 && zxid > 0 {
		storeMax(&c.s.zxid, zxid)
	}
	r, ok := c.pop()
	if !ok || r.hello || r.xid != xid || binary.BigEndian.Uint32(head[12:16]) != 0 {
		return // unmatched, or an error: proves nothing
	}
	c.s.heardAt(r.sent)
	c.candidate(r.sent, now)
	if r.carries >= 0 {
		c.reported = max(c.reported, r.carries)
	}
	if r.proves >= 0 {
		c.s.confirmedAt(r.proves)
	}
}

// candidate records a successful reply, unless it came within a tenth of
// the report gap of the previous one: it would only make the evidence a
// little fresher, and the list longer.
func (c *trackedConn) candidate(sent, got time.Duration) {
	if k := len(c.cands); k > 0 && got-c.cands[k-1].got < c.s.reportGap()/10 {
		return
	}
	c.cands = append(c.cands, candidate{sent, got})
}

// readyAt returns the send time of the newest reply received at least the
// report gap before now (-1 if none): a request the leader answers that is
// sent at now will reach it after a ping reply that reported that touch.
func (c *trackedConn) readyAt(now time.Duration) time.Duration {
	gap := c.s.reportGap()
	i := 0
	for i < len(c.cands) && now-c.cands[i].got >= gap {
		c.ready = c.cands[i].sent
		i++
	}
	if i > 0 {
		c.cands = append(c.cands[:0], c.cands[i:]...)
	}
	return c.ready
}

// pop removes and returns the oldest unanswered request.
func (c *trackedConn) pop() (request, bool) {
	if c.first == len(c.sent) {
		return request{}, false
	}
	r := c.sent[c.first]
	c.first++
	if c.first == len(c.sent) {
		c.sent, c.first = c.sent[:0], 0
	}
	return r, true
}

// framer splits a byte stream into ZooKeeper frames (a 4-byte big-endian
// length, then the body) and hands the first bytes of each body to a
// function.
type framer struct {
	size    [4]byte
	nsize   int // bytes of the size read
	body    int // the current frame's body length
	left    int // bytes of the body still to come
	head    [16]byte
	nhead   int  // bytes of the head collected
	wanted  int  // head bytes to collect for the current frame
	pending bool // the current frame's head is not delivered yet
	frames  int  // frames begun

	// zeroZxid: feed sets the zxid of every reply header but the first
	// (the handshake's) to zero, once it is in the head.
	zeroZxid bool
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
			f.body = int(binary.BigEndian.Uint32(f.size[:]))
			f.left = f.body
			f.nhead, f.wanted, f.pending = 0, min(want, f.left), true
			f.frames++
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
		if f.zeroZxid && f.frames > 1 {
			off := f.body - f.left
			for i := max(off, zxidOffset); i < min(off+k, zxidOffset+8); i++ {
				p[i-off] = 0
			}
		}
		f.left -= k
		p = p[k:]
		if f.left == 0 {
			f.nsize = 0
		}
	}
}
