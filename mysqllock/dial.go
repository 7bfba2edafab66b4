package mysqllock

import (
	"context"
	"encoding/binary"
	"net"
	"strings"
	"sync"
	"syscall"

	"github.com/go-sql-driver/mysql"
)

// Sockets records the sockets a pool dials by the connection id the
// server announces in its handshake, so that a session finds its socket by
// CONNECTION_ID() (see Options.Sockets): go-sql-driver's dial hook
// (mysql.Config.DialFunc) is the one place to see a *sql.Conn's socket.
// Make one with WatchSockets.
type Sockets struct {
	opaque bool // TLS or compression: what is read is not plain packets

	mu   sync.Mutex
	byID map[uint32]*sniffConn
}

// WatchSockets makes the connections of cfg dial through the Sockets it
// returns, keeping cfg's own DialFunc if it has one; pass it as
// Options.Sockets to a driver on a *sql.DB made from cfg afterwards (with
// mysql.NewConnector and sql.OpenDB). See docs/MYSQL.md for an example.
func WatchSockets(cfg *mysql.Config) *Sockets {
	// The compression flag is unexported: its DSN form tells.
	opaque := cfg.TLS != nil || cfg.TLSConfig != "" && cfg.TLSConfig != "false" ||
		strings.Contains(cfg.FormatDSN(), "compress=true")
	s := &Sockets{opaque: opaque, byID: map[uint32]*sniffConn{}}
	dial := cfg.DialFunc
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		nc, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		if tc, ok := nc.(*net.TCPConn); ok {
			// go-sql-driver sees this one wrapped: no keep-alive from it.
			_ = tc.SetKeepAlive(true)
		}
		return &sniffConn{Conn: nc, s: s}, nil
	}
	return s
}

// socket returns the socket of connection id, or nil.
func (s *Sockets) socket(id int64) net.Conn {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.byID[uint32(id)]; c != nil {
		return c.Conn
	}
	return nil
}

// A sniffConn is a socket that sniffs the connection id from the handshake
// as go-sql-driver reads it, then records itself in s under it until closed.
type sniffConn struct {
	net.Conn
	s *Sockets
	// head gathers the handshake until done (the id read, or not
	// understood), while only the dialling goroutine reads.
	head []byte
	done bool
	id   uint32
}

// Read reads from the socket, and sniffs the handshake's connection id.
func (c *sniffConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if !c.done && n > 0 {
		c.sniff(p[:n])
	}
	return n, err
}

// sniff adds b to the handshake bytes and records the connection once its
// id is known: after a 4-byte packet header, protocol version 10, a
// NUL-terminated server version, then the 4-byte connection id.
func (c *sniffConn) sniff(b []byte) {
	c.head = append(c.head, b...)
	h := c.head
	if len(h) < 5 {
		return
	}
	if h[4] != 10 { // an error packet, or another protocol: give up
		c.done, c.head = true, nil
		return
	}
	for i := 5; i < len(h); i++ {
		if h[i] != 0 {
			continue
		}
		if len(h) < i+5 {
			return // the id has not all arrived
		}
		c.id = binary.LittleEndian.Uint32(h[i+1 : i+5])
		c.done, c.head = true, nil
		c.s.mu.Lock()
		c.s.byID[c.id] = c
		c.s.mu.Unlock()
		return
	}
	if len(h) > 512 {
		c.done, c.head = true, nil
	}
}

// Close forgets the socket and closes it.
func (c *sniffConn) Close() error {
	c.s.mu.Lock()
	if c.s.byID[c.id] == c {
		delete(c.s.byID, c.id)
	}
	c.s.mu.Unlock()
	return c.Conn.Close()
}

// SyscallConn gives the liveness check and the watch the raw socket.
func (c *sniffConn) SyscallConn() (syscall.RawConn, error) {
	sc, ok := c.Conn.(syscall.Conn)
	if !ok {
		return nil, syscall.EINVAL
	}
	return sc.SyscallConn()
}
