// Package faultproxy is a TCP forwarder on loopback whose links can be
// cut, delayed or black-holed, for the safety suite's network faults.
package faultproxy

import (
	"net"
	"sync"
	"time"
)

// A Proxy accepts connections on Addr and forwards each to its target.
// Its methods are safe for concurrent use.
type Proxy struct {
	// Addr is the loopback address clients connect to.
	Addr string

	ln net.Listener
	wg sync.WaitGroup

	mu        sync.Mutex
	target    string
	delay     time.Duration
	blackhole bool
	links     map[*link]struct{}
	closed    bool
}

// link is one forwarded connection: the client's side and the target's.
type link struct {
	client, server net.Conn
}

func (l *link) close() {
	_ = l.client.Close()
	_ = l.server.Close()
}

// Start listens on a free loopback port and forwards to target.
func Start(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{Addr: ln.Addr().String(), ln: ln, target: target, links: map[*link]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// SetTarget makes new connections go to addr; current links stay on the
// old target (Cut them to move every client).
func (p *Proxy) SetTarget(addr string) {
	p.mu.Lock()
	p.target = addr
	p.mu.Unlock()
}

// SetDelay delays every chunk of data, in both directions, by d from the
// moment the proxy read it (order is kept). Zero forwards at once.
func (p *Proxy) SetDelay(d time.Duration) {
	p.mu.Lock()
	p.delay = d
	p.mu.Unlock()
}

// SetBlackhole drops (on) or forwards again (off) every chunk of data in
// both directions, without closing anything: to both ends the network
// has gone silent, as in a partition. Data dropped meanwhile is lost, so
// a link that lived through a black hole is usually unusable after it.
func (p *Proxy) SetBlackhole(on bool) {
	p.mu.Lock()
	p.blackhole = on
	p.mu.Unlock()
}

// Cut closes every current link; both ends see their connection end.
// New connections are accepted as before.
func (p *Proxy) Cut() {
	p.mu.Lock()
	links := p.links
	p.links = map[*link]struct{}{}
	p.mu.Unlock()
	for l := range links {
		l.close()
	}
}

// Close stops listening, cuts every link and waits for the proxy's
// goroutines to end.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	err := p.ln.Close()
	p.Cut()
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		target := p.target
		p.mu.Unlock()
		s, err := net.DialTimeout("tcp", target, time.Second)
		if err != nil {
			_ = c.Close()
			continue
		}
		l := &link{client: c, server: s}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			l.close()
			return
		}
		p.links[l] = struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(l, c, s)
		go p.pipe(l, s, c)
	}
}

// chunk is data read at a time, waiting for its delay.
type chunk struct {
	data []byte
	due  time.Time
}

// pipe copies from src to dst, applying the proxy's delay and black hole,
// until either side ends; then it closes the link.
func (p *Proxy) pipe(l *link, src, dst net.Conn) {
	defer p.wg.Done()
	queue := make(chan chunk, 1024)
	done := make(chan struct{})
	go func() { // the writer: keeps order, waits out each chunk's delay
		defer close(done)
		for c := range queue {
			if d := time.Until(c.due); d > 0 {
				time.Sleep(d)
			}
			if _, err := dst.Write(c.data); err != nil {
				l.close()
				for range queue { // drain until the reader ends
				}
				return
			}
		}
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			delay, drop := p.delay, p.blackhole
			p.mu.Unlock()
			if !drop {
				queue <- chunk{data: append([]byte(nil), buf[:n]...), due: time.Now().Add(delay)}
			}
		}
		if err != nil { // EOF, a reset or Cut: the link ends either way
			break
		}
	}
	close(queue)
	<-done
	l.close()
	p.mu.Lock()
	delete(p.links, l)
	p.mu.Unlock()
}
