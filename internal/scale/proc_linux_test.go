package scale

import (
	"net"
	"testing"
	"time"
)

// TestProcsFindsTheListener: the process listening on a loopback address
// is found (this test's own), and its CPU and memory read.
func TestProcsFindsTheListener(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	p := newProcs([]string{ln.Addr().String(), "192.0.2.1:1"})
	if len(p.roots) != 1 {
		t.Fatalf("found %v listening on %s, want this process", p.roots, ln.Addr())
	}
	busy := time.Now().Add(50 * time.Millisecond)
	for time.Now().Before(busy) {
	}
	if cpu, ok := p.cpu(); !ok || cpu <= 0 {
		t.Errorf("cpu = %v, %v", cpu, ok)
	}
	if m, ok := p.memory(); !ok || m <= 0 {
		t.Errorf("memory = %v, %v", m, ok)
	}
	if _, ok := newProcs([]string{"192.0.2.1:6379"}).cpu(); ok {
		t.Error("a server that is not on loopback was read")
	}
}
