package pglock

import (
	"io"
	"net"
	"testing"
	"time"
)

// socketPair returns the two ends of a loopback TCP connection: ours, as
// a driver would have dialled it, and the server's.
func socketPair(t *testing.T) (ours, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			t.Error(err)
		}
		accepted <- c
	}()
	ours, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server = <-accepted
	t.Cleanup(func() { _ = ours.Close(); _ = server.Close() })
	return ours, server
}

// TestSockWatch: what the watch makes of a quiet socket, unsolicited
// bytes (left in the socket for the protocol's reader), an ErrorResponse,
// and a close; and that a pause takes the socket from a wait at once.
func TestSockWatch(t *testing.T) {
	if !canPeek {
		t.Skip("no peek on this system")
	}
	t.Run("quiet", func(t *testing.T) {
		ours, _ := socketPair(t)
		w := newSockWatch(ours, ours)
		w.start()
		if v, _ := w.look(); v != vQuiet {
			t.Errorf("look = %v, want quiet", v)
		}
		if ev, _ := w.wait(time.Now().Add(20 * time.Millisecond)); ev != evDeadline {
			t.Errorf("wait = %v, want the deadline", ev)
		}
	})
	t.Run("notice", func(t *testing.T) {
		ours, server := socketPair(t)
		w := newSockWatch(ours, ours)
		w.start()
		msg := []byte("N\x00\x00\x00\x04")
		_, _ = server.Write(msg)
		if ev, _ := w.wait(time.Now().Add(5 * time.Second)); ev != evData {
			t.Errorf("wait = %v, want data", ev)
		}
		if v, _ := w.look(); v != vData {
			t.Errorf("look = %v, want data", v)
		}
		w.pause()
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(ours, got); err != nil || string(got) != string(msg) {
			t.Errorf("the protocol's read got %q, %v; want the bytes untouched", got, err)
		}
		w.resume()
	})
	t.Run("error response", func(t *testing.T) {
		ours, server := socketPair(t)
		w := newSockWatch(ours, ours)
		w.start()
		_, _ = server.Write([]byte("E\x00\x00\x00\x10SFATAL\x00"))
		if ev, _ := w.wait(time.Now().Add(5 * time.Second)); ev != evGone {
			t.Errorf("wait = %v, want gone", ev)
		}
	})
	t.Run("close", func(t *testing.T) {
		ours, server := socketPair(t)
		w := newSockWatch(ours, ours)
		w.start()
		done := make(chan event, 1)
		go func() { ev, _ := w.wait(time.Now().Add(5 * time.Second)); done <- ev }()
		time.Sleep(10 * time.Millisecond)
		_ = server.Close()
		if ev := <-done; ev != evGone {
			t.Errorf("wait = %v, want gone", ev)
		}
		if v, _ := w.look(); v != vGone {
			t.Errorf("look after the close = %v, want gone", v)
		}
	})
	t.Run("pause", func(t *testing.T) {
		ours, server := socketPair(t)
		w := newSockWatch(ours, ours)
		w.start()
		done := make(chan event, 1)
		go func() { ev, _ := w.wait(time.Now().Add(10 * time.Second)); done <- ev }()
		time.Sleep(10 * time.Millisecond)
		start := time.Now()
		w.pause()
		if took := time.Since(start); took > 100*time.Millisecond {
			t.Errorf("pause took %v", took)
		}
		if v, _ := w.look(); v != vQuiet {
			t.Errorf("look while paused = %v, want quiet (no look)", v)
		}
		// The query's traffic is the protocol's: the watch does not see it.
		_, _ = server.Write([]byte("E"))
		buf := make([]byte, 1)
		if _, err := ours.Read(buf); err != nil {
			t.Fatal(err)
		}
		select {
		case ev := <-done:
			t.Fatalf("wait returned %v during the pause", ev)
		case <-time.After(20 * time.Millisecond):
		}
		w.resume()
		_ = server.Close()
		if ev := <-done; ev != evGone {
			t.Errorf("wait after the pause = %v, want gone", ev)
		}
		w.stop()
		if ev, _ := w.wait(time.Now().Add(time.Second)); ev != evStopped {
			t.Errorf("wait after stop = %v, want stopped", ev)
		}
	})
}
