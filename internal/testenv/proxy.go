package testenv

import (
	"bytes"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// A Proxy forwards loopback TCP connections to a server, and can hold
// back what the server sends (Hold, Deliver), as a network that delays
// segments would. A server's close reaches the client only when the test
// ends: a proxy stands for a path on which the server's FIN comes late.
type Proxy struct {
	Addr string // where clients connect

	mu      sync.Mutex
	cond    sync.Cond
	holding bool
	held    map[net.Conn]*bytes.Buffer // per client connection, while holding
	closed  int                        // server connections that ended
	wg      sync.WaitGroup
}

// StartProxy starts a proxy to the server at addr, stopped when t ends.
func StartProxy(t testing.TB, addr string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{Addr: ln.Addr().String(), held: map[net.Conn]*bytes.Buffer{}}
	p.cond.L = &p.mu
	var conns []net.Conn
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", addr)
			if err != nil {
				t.Errorf("proxy: dial %s: %v", addr, err)
				_ = c.Close()
				continue
			}
			p.mu.Lock()
			conns = append(conns, c, s)
			p.mu.Unlock()
			p.wg.Go(func() { _, _ = io.Copy(s, c); _ = s.Close() })
			p.wg.Go(func() { p.toClient(c, s) })
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		p.mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

// toClient copies what server s sends to client c, or holds it while the
// proxy holds; at s's end it keeps c open (see Proxy).
func (p *Proxy) toClient(c, s net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := s.Read(buf)
		p.mu.Lock()
		if p.holding {
			b := p.held[c]
			if b == nil {
				b = new(bytes.Buffer)
				p.held[c] = b
			}
			b.Write(buf[:n])
		} else if n > 0 {
			_, _ = c.Write(buf[:n])
		}
		if err != nil {
			p.closed++
		}
		p.cond.Broadcast()
		p.mu.Unlock()
		if err != nil {
			return
		}
	}
}

// Hold makes the proxy keep what servers send from their clients.
func (p *Proxy) Hold() {
	p.mu.Lock()
	p.holding = true
	p.mu.Unlock()
}

// Deliver sends each client what was held for it, in one write, and
// lets later bytes through.
func (p *Proxy) Deliver() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c, b := range p.held {
		_, _ = c.Write(b.Bytes())
	}
	clear(p.held)
	p.holding = false
}

// WaitHeld reports whether, within d, ok returns true for the bytes held
// for one of the clients.
func (p *Proxy) WaitHeld(d time.Duration, ok func(held []byte) bool) bool {
	return p.wait(d, func() bool {
		for _, b := range p.held {
			if ok(b.Bytes()) {
				return true
			}
		}
		return false
	})
}

// WaitClosed reports whether, within d, n server connections have ended.
func (p *Proxy) WaitClosed(d time.Duration, n int) bool {
	return p.wait(d, func() bool { return p.closed >= n })
}

// wait waits up to d for done, called with p.mu held, to return true.
func (p *Proxy) wait(d time.Duration, done func() bool) bool {
	expired := false
	tm := time.AfterFunc(d, func() {
		p.mu.Lock()
		expired = true
		p.cond.Broadcast()
		p.mu.Unlock()
	})
	defer tm.Stop()
	p.mu.Lock()
	defer p.mu.Unlock()
	for !done() {
		if expired {
			return false
		}
		p.cond.Wait()
	}
	return true
}
