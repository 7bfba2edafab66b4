package sockwatch

import (
	"io"
	"net"
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

// TestJudgeBusy: with JudgeBusy, a look while a statement has the socket
// finds a session-ending frame before the server's close, and leaves a
// frame the test does not judge (the statement's own error) to the
// statement.
func TestJudgeBusy(t *testing.T) {
	if !canPeek {
		t.Skip("no peek on this system")
	}
	fatal := func(f []byte) bool { return len(f) >= 7 && f[0] == 'E' && f[5] == 'S' && f[6] == 'F' }
	for _, c := range []struct {
		frame string
		want  Verdict
	}{
		{"E\x00\x00\x00\x20SFATAL\x00", VGone},
		{"E\x00\x00\x00\x20SERROR\x00", VQuiet},
	} {
		ours, server := socketPair(t)
		w := New(ours, false, endsOnE)
		w.JudgeBusy(fatal)
		w.Start()
		w.Pause()
		_, _ = server.Write([]byte(c.frame))
		time.Sleep(20 * time.Millisecond)
		if v, _ := w.Look(); v != c.want {
			t.Errorf("look while busy at %q = %v, want %v", c.frame, v, c.want)
		}
		if n := testing.AllocsPerRun(100, func() { w.Look() }); n != 0 {
			t.Errorf("a busy look allocates %v times, want 0", n)
		}
	}
}
