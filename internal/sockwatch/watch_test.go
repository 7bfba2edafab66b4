package sockwatch

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
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

// waiting starts a watch of a fresh socket pair's end ours, and a Wait on
// it for up to timeout, whose event done receives; it returns once the
// Wait has had time to begin.
func waiting(t *testing.T, timeout time.Duration) (w *Watch, ours, server net.Conn, done <-chan Event) {
	ours, server = socketPair(t)
	w = New(ours, false, endsOnE)
	w.Start()
	ch := make(chan Event, 1)
	go func() { ev, _ := w.Wait(time.Now().Add(timeout)); ch <- ev }()
	time.Sleep(10 * time.Millisecond)
	return w, ours, server, ch
}

// endsOnE is the ended function of the tests: PostgreSQL's, a frame whose
// type is 'E' (an ErrorResponse).
func endsOnE(frame []byte) bool { return frame[0] == 'E' }

// TestSockWatch: what the watch makes of a quiet socket, unsolicited
// bytes (left in the socket for the protocol's reader), a frame that ends
// the session (an ErrorResponse, here; mere data under TLS), and a close;
// and that a pause takes the socket from a wait at once.
func TestSockWatch(t *testing.T) {
	if !canPeek {
		t.Skip("no peek on this system")
	}
	t.Run("quiet", func(t *testing.T) {
		ours, _ := socketPair(t)
		w := New(ours, false, endsOnE)
		w.Start()
		if v, _ := w.Look(); v != VQuiet {
			t.Errorf("look = %v, want quiet", v)
		}
		if ev, _ := w.Wait(time.Now().Add(20 * time.Millisecond)); ev != EvDeadline {
			t.Errorf("wait = %v, want the deadline", ev)
		}
	})
	t.Run("notice", func(t *testing.T) {
		ours, server := socketPair(t)
		w := New(ours, false, endsOnE)
		w.Start()
		msg := []byte("N\x00\x00\x00\x04")
		_, _ = server.Write(msg)
		if ev, _ := w.Wait(time.Now().Add(5 * time.Second)); ev != EvData {
			t.Errorf("wait = %v, want data", ev)
		}
		if v, _ := w.Look(); v != VData {
			t.Errorf("look = %v, want data", v)
		}
		w.Pause()
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(ours, got); err != nil || string(got) != string(msg) {
			t.Errorf("the protocol's read got %q, %v; want the bytes untouched", got, err)
		}
		w.Resume()
	})
	t.Run("error response", func(t *testing.T) {
		// On a plain connection it ends the session; under TLS (opaque)
		// only the protocol's reader can judge it.
		for _, opaque := range []bool{false, true} {
			ours, server := socketPair(t)
			w := New(ours, opaque, endsOnE)
			w.Start()
			_, _ = server.Write([]byte("E\x00\x00\x00\x10SFATAL\x00"))
			want := EvGone
			if opaque {
				want = EvData
			}
			if ev, _ := w.Wait(time.Now().Add(5 * time.Second)); ev != want {
				t.Errorf("opaque %v: wait = %v, want %v", opaque, ev, want)
			}
		}
	})
	t.Run("close", func(t *testing.T) {
		w, _, server, done := waiting(t, 5*time.Second)
		_ = server.Close()
		if ev := <-done; ev != EvGone {
			t.Errorf("wait = %v, want gone", ev)
		}
		if v, _ := w.Look(); v != VGone {
			t.Errorf("look after the close = %v, want gone", v)
		}
	})
	t.Run("pause", func(t *testing.T) {
		w, ours, server, done := waiting(t, 10*time.Second)
		// Pause does not wait for the wait to end on its own (its deadline
		// is 10 s away): within 5 s, it interrupted it.
		start := time.Now()
		w.Pause()
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("pause took %v: it waited for the wait's 10 s deadline", took)
		}
		if v, _ := w.Look(); v != VQuiet {
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
		w.Resume()
		_ = server.Close()
		if ev := <-done; ev != EvGone {
			t.Errorf("wait after the pause = %v, want gone", ev)
		}
		w.Stop()
		if ev, _ := w.Wait(time.Now().Add(time.Second)); ev != EvStopped {
			t.Errorf("wait after stop = %v, want stopped", ev)
		}
	})
}

// TestConcurrentLooks: looks that run at once each look for themselves.
// After the server's close, every one of many looks from several
// goroutines at once finds the server gone; none answers "quiet" because
// another look had the socket at that moment (as a single "looking" state
// made them). Looks also never allocate, alone or side by side.
func TestConcurrentLooks(t *testing.T) {
	if !canPeek {
		t.Skip("no peek on this system")
	}
	ours, server := socketPair(t)
	w := New(ours, false, endsOnE)
	w.Start()
	if n := testing.AllocsPerRun(1000, func() { _, _ = w.Look() }); n != 0 {
		t.Errorf("a look allocates %v times", n)
	}
	_ = server.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if v, _ := w.Look(); v == VGone {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the close never showed")
		}
		time.Sleep(time.Millisecond)
	}
	const goroutines, looks = 8, 2000
	var wrong atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for range looks {
				if v, _ := w.Look(); v != VGone {
					wrong.Add(1)
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	if n := wrong.Load(); n != 0 {
		t.Errorf("%d of %d looks at once found the closed socket other than gone", n, goroutines*looks)
	}
	if s := w.state.Load(); s != 0 {
		t.Errorf("state after the looks = %#x, want 0 (idle, no slot in use)", s)
	}
}

// TestTake: Take finds a closed socket gone before any statement, with the
// watch either way stoppable; on a live socket it pauses the watch (Look
// then skips the socket, Wait sits the statement out), leaves unsolicited
// bytes for the driver, and waits for looks in flight: no look runs
// between Take and Resume, whatever runs beside it.
func TestTake(t *testing.T) {
	if !canPeek {
		t.Skip("no peek on this system")
	}
	t.Run("closed", func(t *testing.T) {
		w, _, server, done := waiting(t, 5*time.Second)
		_ = server.Close()
		if v, _ := w.Take(); v != VGone {
			t.Errorf("take of a closed socket = %v, want gone", v)
		}
		w.Stop()
		if ev := <-done; ev != EvGone && ev != EvStopped {
			t.Errorf("wait = %v, want gone or stopped", ev)
		}
	})
	t.Run("error response", func(t *testing.T) {
		// The session-ended frame counts as gone on a plain connection.
		ours, server := socketPair(t)
		w := New(ours, false, endsOnE)
		w.Start()
		_, _ = server.Write([]byte("E\x00\x00\x00\x10SFATAL\x00"))
		time.Sleep(20 * time.Millisecond)
		if v, _ := w.Take(); v != VGone {
			t.Errorf("take = %v, want gone", v)
		}
	})
	t.Run("live", func(t *testing.T) {
		w, ours, server, done := waiting(t, 10*time.Second)
		// Lookers beside the statements: while the socket is taken, the
		// state must show it busy with no look in flight, every time.
		var stop atomic.Bool
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for !stop.Load() {
					_, _ = w.Look()
					// Let the waiting goroutine have a CPU too: Take waits
					// for it to leave its read.
					runtime.Gosched()
				}
			}()
		}
		for range 200 {
			if v, _ := w.Take(); v != VQuiet {
				t.Fatalf("take of a live socket = %v, want quiet", v)
			}
			if s := w.state.Load(); s != stBusy {
				t.Fatalf("state while taken = %#x, want busy with no look in flight", s)
			}
			w.Resume()
		}
		stop.Store(true)
		wg.Wait()
		msg := []byte("N\x00\x00\x00\x04")
		_, _ = server.Write(msg)
		if ev := <-done; ev != EvData {
			t.Fatalf("wait = %v, want data", ev)
		}
		if v, _ := w.Take(); v != VData {
			t.Errorf("take with a notice waiting = %v, want data (left for the driver)", v)
		}
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(ours, got); err != nil || string(got) != string(msg) {
			t.Errorf("the driver's read got %q, %v; want the bytes untouched", got, err)
		}
		w.Resume()
		w.Stop()
	})
}

// TestLookWhileBusy: while a statement has the socket, a look does not
// peek (the bytes are the statement's reply) but still finds a server
// that closed the connection from its TCP state, whatever bytes came
// before the close, and allocates nothing while the connection is up; and
// under TLS, bytes followed by a close are a close.
func TestLookWhileBusy(t *testing.T) {
	if !canPeek {
		t.Skip("no peek on this system")
	}
	for _, c := range []struct {
		name   string
		opaque bool
		busy   bool
		before string // what the server sends before it closes
	}{
		{"statement running, reply then close", false, true, "I\x00\x00\x00\x04Z\x00\x00\x00\x05I"},
		{"statement running, close alone", false, true, ""},
		{"idle, tls bytes then close", true, false, "\x17\x03\x03\x00\x10"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ours, server := socketPair(t)
			w := New(ours, c.opaque, endsOnE)
			w.Start()
			if c.busy {
				w.Pause() // a statement has the socket
			}
			if v, _ := w.Look(); v != VQuiet {
				t.Fatalf("look before the close = %v, want quiet", v)
			}
			if n := testing.AllocsPerRun(100, func() { w.Look() }); n != 0 {
				t.Errorf("a look allocates %v times, want 0", n)
			}
			if c.before != "" {
				_, _ = server.Write([]byte(c.before))
			}
			_ = server.Close()
			deadline := time.Now().Add(2 * time.Second)
			for {
				v, _ := w.Look()
				if v == VGone {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("look 2s after the server closed = %v, want gone", v)
				}
				time.Sleep(time.Millisecond)
			}
			// The stream is untouched: the statement still reads the reply.
			if c.before != "" && !c.opaque {
				buf := make([]byte, len(c.before))
				_ = ours.SetReadDeadline(time.Now().Add(time.Second))
				if _, err := io.ReadFull(ours, buf); err != nil || string(buf) != c.before {
					t.Errorf("the statement read %q, %v; want %q", buf, err, c.before)
				}
			}
		})
	}
}

// pgFraming is PostgreSQL's framing, as pglock gives it: a type byte and
// a length that counts itself; a FATAL ErrorResponse ends the session.
var pgFraming = Framing{
	Header: 5,
	Len:    func(h []byte) int { return 1 + int(binary.BigEndian.Uint32(h[1:5])) },
	Judge:  7,
	Ends:   func(f []byte) bool { return len(f) >= 7 && f[0] == 'E' && f[5] == 'S' && f[6] == 'F' },
}

// Frames of the tests: a query's reply (EmptyQueryResponse, then
// ReadyForQuery), a query's own error, and the FATAL a terminated backend
// sends.
const (
	reply   = "I\x00\x00\x00\x04Z\x00\x00\x00\x05I"
	errorE  = "E\x00\x00\x00\x0cSERROR\x00\x00"
	fatalE  = "E\x00\x00\x00\x0cSFATAL\x00\x00"
	noticeN = "N\x00\x00\x00\x05x"
)

// TestFramesScan: the frame follower finds a session-ending frame however
// the stream is cut into reads, only where one is, and never in a frame's
// body (a FATAL inside a notice's text).
func TestFramesScan(t *testing.T) {
	for _, c := range []struct {
		stream string
		want   bool
	}{
		{reply + fatalE, true},
		{reply + errorE, false},
		{errorE + reply + noticeN + fatalE + reply, true},
		{"N\x00\x00\x00\x0e" + fatalE[:10] + reply, false}, // a FATAL's bytes in a body
		{reply + reply + reply, false},
	} {
		for cut := 0; cut <= len(c.stream); cut++ {
			for cut2 := cut; cut2 <= len(c.stream); cut2++ {
				var fs frames
				a := fs.scan([]byte(c.stream[:cut]), &pgFraming)
				b := fs.scan([]byte(c.stream[cut:cut2]), &pgFraming)
				d := fs.scan([]byte(c.stream[cut2:]), &pgFraming)
				if got := a || b || d; got != c.want {
					t.Fatalf("%q read as %d, %d, rest bytes: ended = %v, want %v", c.stream, cut, cut2-cut, got, c.want)
				}
				if fs.hn != 0 || fs.total != 0 || fs.rest != 0 {
					t.Fatalf("%q read as %d, %d, rest: not at a frame's start after the last frame: %+v", c.stream, cut, cut2-cut, fs)
				}
			}
		}
	}
}

// TestStreamLooks: on a Stream, a look while a statement has the socket
// finds a FATAL queued behind the statement's reply (not only at the
// head), or already read by the driver, which then parses it (or does not
// yet, having stopped at the reply's end); an ERROR, the statement's own
// reply, is left to the statement. No look allocates, nor does a read.
func TestStreamLooks(t *testing.T) {
	if !canPeek {
		t.Skip("no peek on this system")
	}
	for _, c := range []struct {
		name   string
		sent   string // what the server sends during the statement
		read   int    // bytes the driver reads before the look
		idle   bool   // the statement ends (Resume) before the look
		want   Verdict
		closed bool // whether the stream then ends at the server's close
	}{
		{"fatal queued behind the reply", reply + fatalE, 0, false, VGone, false},
		{"fatal queued, part of the reply read", reply + fatalE, 3, false, VGone, false},
		{"fatal read with the reply", reply + fatalE, len(reply + fatalE), false, VGone, false},
		{"fatal read with the reply, statement over", reply + fatalE, len(reply + fatalE), true, VGone, false},
		{"error, the statement's", errorE, 0, false, VQuiet, false},
		{"error read, statement over", errorE + reply, len(errorE + reply), true, VQuiet, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			ours, server := socketPair(t)
			s := Follow(ours, pgFraming)
			w := New(s, false, endsOnE)
			w.Start()
			w.Pause() // a statement has the socket
			if _, err := server.Write([]byte(c.sent)); err != nil {
				t.Fatal(err)
			}
			// The bytes are there once a peek sees them all.
			buf := make([]byte, 64)
			for {
				var n int
				if err := w.rc.Control(func(fd uintptr) { n, _ = peek(fd, buf) }); err != nil {
					t.Fatal(err)
				}
				if n == len(c.sent) {
					break
				}
				time.Sleep(time.Millisecond)
			}
			if c.read > 0 {
				_ = s.SetReadDeadline(time.Now().Add(10 * time.Second))
				got := make([]byte, c.read)
				if _, err := io.ReadFull(s, got); err != nil || string(got) != c.sent[:c.read] {
					t.Fatalf("the driver read %q, %v; want %q", got, err, c.sent[:c.read])
				}
			}
			if c.idle {
				w.Resume()
			}
			if v, _ := w.Look(); v != c.want {
				t.Fatalf("look = %v, want %v", v, c.want)
			}
			if n := testing.AllocsPerRun(100, func() { w.Look() }); n != 0 {
				t.Errorf("a look allocates %v times, want 0", n)
			}
		})
	}
}

// TestStreamRead: a Stream reads as its connection does: the bytes, a
// read deadline's timeout, the end of the stream; without allocating.
func TestStreamRead(t *testing.T) {
	if !canPeek {
		t.Skip("no peek on this system")
	}
	ours, server := socketPair(t)
	s := Follow(ours, pgFraming)
	if _, ok := s.(*Stream); !ok {
		t.Fatalf("Follow of a TCP connection = %T, want a *Stream", s)
	}
	buf := make([]byte, 64)
	_ = s.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	if _, err := s.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past its deadline: %v, want os.ErrDeadlineExceeded", err)
	} else if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
		t.Fatalf("read past its deadline: %v is not a net.Error timeout", err)
	}
	_ = s.SetReadDeadline(time.Time{})
	sent := []byte(reply)
	n := testing.AllocsPerRun(100, func() {
		if _, err := server.Write(sent); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(s, buf[:len(reply)]); err != nil || string(buf[:len(reply)]) != reply {
			t.Fatalf("read %q, %v; want %q", buf[:len(reply)], err, reply)
		}
	})
	if n != 0 {
		t.Errorf("a read allocates %v times, want 0", n)
	}
	_ = server.Close()
	if _, err := s.Read(buf); err != io.EOF {
		t.Fatalf("read at the end of the stream: %v, want io.EOF", err)
	}
}
