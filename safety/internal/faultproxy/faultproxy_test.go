package faultproxy

import (
	"bufio"
	"net"
	"testing"
	"time"
)

// echoServer answers each line with the same line, until the test ends.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := c.Write([]byte(line)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// roundTrip sends a line through c and times its echo.
func roundTrip(t *testing.T, c net.Conn, r *bufio.Reader) (time.Duration, error) {
	t.Helper()
	start := time.Now()
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return 0, err
	}
	_ = c.SetReadDeadline(time.Now().Add(time.Second))
	_, err := r.ReadString('\n')
	return time.Since(start), err
}

func TestProxy(t *testing.T) {
	p, err := Start(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	if _, err := roundTrip(t, c, r); err != nil {
		t.Fatalf("forwarding: %v", err)
	}

	p.SetDelay(100 * time.Millisecond)
	d, err := roundTrip(t, c, r)
	if err != nil || d < 200*time.Millisecond {
		t.Fatalf("delayed round trip took %v (%v), want at least 200ms (100ms each way)", d, err)
	}
	p.SetDelay(0)

	p.SetBlackhole(true)
	if _, err := roundTrip(t, c, r); err == nil {
		t.Fatal("a round trip went through the black hole")
	}
	p.SetBlackhole(false)

	p.Cut()
	_ = c.SetReadDeadline(time.Now().Add(time.Second))
	if _, err := r.ReadString('\n'); err == nil {
		t.Fatal("the link survived Cut")
	}
	c2, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if _, err := roundTrip(t, c2, bufio.NewReader(c2)); err != nil {
		t.Fatalf("a new connection after Cut: %v", err)
	}
}
