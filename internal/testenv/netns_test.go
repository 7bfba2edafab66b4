package testenv

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// reach reports whether a connection from "from" to l's address gets a
// byte back within 300ms.
func reach(from *Host, l net.Listener) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	c, err := from.DialContext(ctx, "tcp", l.Addr().String())
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(300 * time.Millisecond))
	var b [1]byte
	_, err = io.ReadFull(c, b[:])
	return err == nil
}

func serve(t *testing.T, h *Host) net.Listener {
	t.Helper()
	l, err := h.Listen("tcp", h.Addr(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte{1})
			c.Close()
		}
	}()
	return l
}

func TestNet(t *testing.T) {
	var id int
	t.Run("links", func(t *testing.T) {
		nt := StartNet(t, 3)
		id = nt.id
		a, b, c := nt.Hosts[0], nt.Hosts[1], nt.Hosts[2]
		la, lb := serve(t, a), serve(t, b)
		if !reach(b, la) || !reach(c, la) || !reach(a, lb) {
			t.Fatal("hosts do not reach each other before any fault")
		}
		// The test process (root namespace) reaches hosts through the gateway.
		if conn, err := net.DialTimeout("tcp", la.Addr().String(), time.Second); err != nil {
			t.Fatalf("root namespace does not reach %s: %v", a, err)
		} else {
			conn.Close()
		}

		nt.Partition([]*Host{a}, []*Host{b, c})
		if reach(b, la) || reach(c, la) || reach(a, lb) {
			t.Error("a partition let packets through between its sides")
		}
		if !reach(c, lb) {
			t.Error("a partition cut hosts on the same side")
		}
		if conn, err := net.DialTimeout("tcp", la.Addr().String(), time.Second); err != nil {
			t.Errorf("a partition between hosts cut the gateway: %v", err)
		} else {
			conn.Close()
		}

		nt.Heal()
		if !reach(b, la) || !reach(a, lb) {
			t.Error("Heal left a link cut")
		}

		nt.Isolate(a)
		if conn, err := net.DialTimeout("tcp", la.Addr().String(), 300*time.Millisecond); err == nil {
			conn.Close()
			t.Error("Isolate left the gateway's link")
		}
		if !reach(b, la) {
			t.Error("Isolate cut another host")
		}
		nt.Heal()

		// One direction: a drops what comes from b. b's packets to a are
		// lost; a's packets to b arrive (b's replies do not).
		nt.Drop(a, b)
		if reach(b, la) {
			t.Error("Drop(a, b) let b reach a")
		}
		if !reach(c, la) {
			t.Error("Drop(a, b) cut c")
		}
	})
	// The cleanup removed the namespaces and the bridge.
	if _, err := os.Stat(fmt.Sprintf("/sys/class/net/dlkbr%d", id)); err == nil {
		t.Errorf("bridge dlkbr%d left behind", id)
	}
	if _, err := os.Stat(fmt.Sprintf("/var/run/netns/dlk%dh0", id)); err == nil {
		t.Errorf("namespace dlk%dh0 left behind", id)
	}
}
