package zklock

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/internal/tlsprobe"
)

// A session is one ZooKeeper session and its zk.Conn. The driver trusts it
// only as long as the ensemble's leader cannot have expired it: it ends,
// for good, when the server reports it expired, when that validity runs
// out (see confirmedAt), or when the driver closes. Ending closes the
// zk.Conn, so that a session the driver gave up on cannot come back to
// life with its locks.
type session struct {
	d     *Driver
	conn  *zk.Conn
	start time.Time // the base of the durations below (monotonic)

	// heard is the send time of the latest request a server answered: the
	// connection is alive. It says nothing of the leader, which alone
	// expires sessions; a follower cut off from it answers pings for
	// syncLimit × tickTime. It is kept for tests and logs only.
	heard atomic.Int64 // time.Duration since start
	// confirmed is the latest instant after which the leader is known to
	// have touched the session (see confirmedAt); valid, the end of the
	// session's validity derived from it: Grant.Check and the watchdog
	// compare the clock with it.
	confirmed atomic.Int64 // time.Duration since start
	valid     atomic.Int64 // time.Duration since start; 0 before the handshake
	granted   atomic.Int64 // session timeout granted by the server; 0 before the handshake
	id        atomic.Int64

	established chan struct{} // closed at the first handshake
	authed      chan struct{} // closed once every Auth was accepted
	estOnce     sync.Once
	watchdog    *time.Timer           // ends the session when valid passes (watch)
	checkFn     func(time.Time) error // s.check, made once: Grant.Check of every lock

	mu  sync.Mutex // guards conn while dialing, and tcp
	tcp net.Conn   // the current TCP connection (for the crash hook)

	// dialErr is why the last connection attempt failed, nil after one
	// succeeded: the cause ready reports when its wait for the session
	// ends first.
	dialErr atomic.Pointer[error]

	// zxid is the newest zxid a reply to the session's requests carried
	// (see trackedConn.withZxid).
	zxid atomic.Int64

	done    chan struct{} // closed when the session ends
	endOnce sync.Once
	over    atomic.Bool // set when the session ends, before done closes
	cause   error       // why it ended; set before over and done
	endErr  error       // the error of operations the end cut short; set with cause
}

// errNoContact ends a session the ensemble may have expired: the leader
// confirmed no contact for almost the session timeout.
var errNoContact = errors.New("zklock: no contact confirmed by the ZooKeeper leader for almost the session timeout: the session may have expired")

// errExpired ends a session the server reported expired.
var errExpired = errors.New("zklock: ZooKeeper session expired")

// dial opens a new session. d.mu is held.
func (d *Driver) dial() (*session, error) {
	s := &session{d: d, start: time.Now(), established: make(chan struct{}), authed: make(chan struct{}),
		done: make(chan struct{})}
	s.watchdog = time.AfterFunc(time.Hour, s.watch)
	s.watchdog.Stop() // armed by monitor at the first handshake
	s.checkFn = s.check
	s.mu.Lock()
	defer s.mu.Unlock()
	conn, _, err := zk.Connect(d.servers, d.timeout,
		zk.WithDialer(s.dialTCP), zk.WithEventCallback(s.event),
		zk.WithLogger(zkLogger{d.log}), zk.WithLogInfo(false))
	if err != nil {
		return nil, fmt.Errorf("zklock: connect to %v: %w", d.servers, err)
	}
	s.conn = conn
	d.bg.Go(s.monitor)
	d.bg.Go(s.authenticate)
	return s, nil
}

// authenticate sends the driver's Auth on the session, before anything
// else is (requests wait for authed: see Driver.ready), and closes authed;
// the zk.Conn sends them again after each reconnection. A refusal ends
// the session with an error naming the identity.
func (s *session) authenticate() {
	for _, a := range s.d.auth {
		if err := s.conn.AddAuth(a.Scheme, []byte(a.Credential)); err != nil {
			if s.ended() {
				return
			}
			if e := s.dialErr.Load(); e != nil && transient(err) {
				s.end(fmt.Errorf("zklock: could not connect to authenticate as %v: %w (%w)", a, *e, err))
				return
			}
			s.end(fmt.Errorf("zklock: authentication as %v refused: %w", a, err))
			return
		}
	}
	close(s.authed)
}

// dialTCP is the zk.Conn's dialer: it wraps every connection in a
// trackedConn, which tells the session when the ensemble last heard from it.
func (s *session) dialTCP(network, addr string, timeout time.Duration) (net.Conn, error) {
	if h := s.d.hooks(); h != nil && h.refuse.Load() {
		return nil, errors.New("zklock: connections refused (crashed client)")
	}
	c, err := net.DialTimeout(network, addr, timeout)
	if err != nil {
		s.dialErr.Store(&err)
		return nil, err
	}
	s.mu.Lock()
	s.tcp = c
	s.mu.Unlock()
	if cfg := s.d.tls; cfg != nil {
		// ZooKeeper's secure client port: the handshake within the dial's
		// timeout, each server's certificate checked against its host.
		if cfg.ServerName == "" {
			cfg = cfg.Clone()
			cfg.ServerName, _, _ = net.SplitHostPort(addr)
		}
		tc := tls.Client(c, cfg)
		_ = c.SetDeadline(time.Now().Add(timeout))
		if err := tc.Handshake(); err != nil {
			_ = c.Close()
			if e := tlsprobe.NotTLS(addr, err, "leave out tls=true"); e != nil {
				err = e
			} else if errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) {
				// A plain ZooKeeper reads the TLS hello as a frame of an
				// impossible length and drops the connection.
				err = fmt.Errorf("the server at %s does not speak TLS (leave out tls=true): it closed the connection on the TLS hello: %w", addr, err)
			}
			err = fmt.Errorf("zklock: TLS with %s: %w", addr, err)
			s.dialErr.Store(&err)
			return nil, err
		}
		_ = c.SetDeadline(time.Time{})
		s.dialErr.Store(nil)
		return newTrackedConn(tc, s), nil
	}
	s.dialErr.Store(nil)
	return newTrackedConn(c, s), nil
}

// event receives the zk.Conn's events; it must not block.
func (s *session) event(ev zk.Event) {
	if ev.Type == zk.EventNodeDeleted || ev.Type == zk.EventNodeDataChanged {
		s.d.nodeEvent(ev.Path)
		return
	}
	if ev.Type != zk.EventSession {
		return
	}
	switch ev.State {
	case zk.StateExpired:
		s.end(errExpired)
	case zk.StateDisconnected:
		if !s.ended() {
			s.d.log.Warn("zklock: disconnected from ZooKeeper; locks are kept unless the session times out",
				"server", ev.Server, "session", s.id.Load())
		}
	case zk.StateHasSession:
		s.d.log.Debug("zklock: connected", "server", ev.Server, "session", s.id.Load())
	}
}

// clock returns the session's time: the monotonic time since it started.
func (s *session) clock() time.Duration { return time.Since(s.start) }

// greeted records a connect response: the session's id and granted
// timeout. The handshake itself is contact the leader confirmed: a
// follower answers it only once the leader revalidated (and so touched)
// the session, or created it, after the request was sent.
func (s *session) greeted(id int64, timeout time.Duration, sent time.Duration) {
	if id == 0 {
		s.end(errExpired) // the zk.Conn reports it too
		return
	}
	if first := s.id.Load(); first != 0 && first != id {
		s.end(errExpired) // a new session: the old one is gone
		return
	}
	s.id.Store(id)
	s.granted.Store(int64(timeout))
	s.heardAt(sent)
	s.confirmedAt(sent)
	s.estOnce.Do(func() { close(s.established) })
}

// heardAt records that a server answered a request sent at sent.
func (s *session) heardAt(sent time.Duration) { storeMax(&s.heard, int64(sent)) }

// monitor is the session's one goroutine. From the first handshake on, it
// arms the watchdog and sends a sync through the connected server every
// syncEvery, so that contact the leader confirms keeps coming while the
// driver sends nothing else (the replies are counted by trackedConn, like
// those to the driver's own writes).
func (s *session) monitor() {
	select {
	case <-s.established:
	case <-s.done:
		return
	}
	s.watch()
	t := time.NewTimer(s.syncEvery())
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-s.done:
			return
		}
		t.Reset(s.syncEvery())
		// A sync can wait long (a server cut off from its leader never
		// answers): the watchdog, not this loop, ends the session. The
		// zk.Conn's close on the session's end returns it.
		_, _ = s.conn.Sync("/")
	}
}

// end ends the session once: its locks are lost, and its zk.Conn is closed
// so that it cannot renew the session behind the driver's back.
func (s *session) end(cause error) {
	s.endOnce.Do(func() {
		s.cause = cause
		s.endErr = fmt.Errorf("%w: %w", errSessionEnded, cause)
		s.over.Store(true)
		s.watchdog.Stop()
		close(s.done)
		s.d.loseSession(s)
		if !errors.Is(cause, driver.ErrClosed) {
			s.d.log.Warn("zklock: session ended; its locks are lost", "session", s.id.Load(), "cause", cause)
		}
		s.d.bg.Go(func() { // Close waits for it
			s.mu.Lock()
			c := s.conn
			s.mu.Unlock()
			if c != nil {
				c.Close()
			}
		})
	})
}

// ended reports whether the session ended.
func (s *session) ended() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// handshake waits until the session had its first handshake, the session
// ends (errRequeue when the ensemble expired it, else its error), or ctx
// ends (its error, with the last connection attempt's).
func (s *session) handshake(ctx context.Context) error {
	select {
	case <-s.established:
		return nil
	case <-s.done:
		if sessionLost(s.endErr) {
			return errRequeue
		}
		return s.endErr
	case <-ctx.Done():
		return s.withDialErr(ctx.Err())
	}
}

// withDialErr adds to err why the last connection attempt failed, if it
// did.
func (s *session) withDialErr(err error) error {
	if e := s.dialErr.Load(); e != nil {
		return fmt.Errorf("%w; the last connection attempt: %w", err, *e)
	}
	return err
}

// isEstablished reports whether the session had its first handshake.
func (s *session) isEstablished() bool {
	select {
	case <-s.established:
		return true
	default:
		return false
	}
}

// errSessionEnded wraps the cause of a session's end in operation errors.
var errSessionEnded = errors.New("zklock: session ended")

// transient reports whether err is a connection error that a retry on the
// same session can overcome: the zk.Conn reconnects (to another server if
// need be) and keeps the session, unless it expires. Besides its own
// errors, the zk.Conn returns the network's when sending a request fails.
func transient(err error) bool {
	if errors.Is(err, zk.ErrConnectionClosed) || errors.Is(err, zk.ErrNoServer) {
		return true
	}
	_, isNet := err.(net.Error) // passed on unwrapped
	return isNet
}

// unsent reports whether err says a request never reached the server; any
// other connection error leaves it unknown whether it was applied.
func unsent(err error) bool { return errors.Is(err, zk.ErrNoServer) }

// do runs op until it succeeds or fails for good. Connection errors are
// retried while the session lasts; op must be safe to repeat.
func (s *session) do(op func() error) error {
	pause := 2 * time.Millisecond
	for {
		err := op()
		if err == nil {
			return nil
		}
		if s.ended() || errors.Is(err, zk.ErrSessionExpired) || errors.Is(err, zk.ErrClosing) {
			<-s.waitEnd(err)
			return s.endErr
		}
		if !transient(err) || !s.isEstablished() {
			return err
		}
		if !s.sleep(pause) {
			return s.endErr
		}
		pause = min(2*pause, 100*time.Millisecond)
	}
}

// listChildren lists p's children, retried as do retries.
func (s *session) listChildren(p string) (names []string, err error) {
	err = s.do(func() (err error) {
		names, _, err = s.conn.Children(p)
		return err
	})
	return names, err
}

// exists reads p's stat, retried as do retries; ok is false when p is gone.
func (s *session) exists(p string) (ok bool, st *zk.Stat, err error) {
	err = s.do(func() (err error) {
		ok, st, err = s.conn.Exists(p)
		return err
	})
	return ok, st, err
}

// waitEnd returns s.done, first ending the session if err says it is over
// and the zk.Conn's event has not ended it yet.
func (s *session) waitEnd(err error) <-chan struct{} {
	if !s.ended() {
		s.end(fmt.Errorf("zklock: %w", err))
	}
	return s.done
}

// sleep pauses for d; it reports false if the session ended meanwhile.
func (s *session) sleep(d time.Duration) bool { return sleep(d, s.done) }

// sleep pauses for d; it reports false if done closed meanwhile.
func sleep(d time.Duration, done <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-done:
		return false
	}
}

// call runs fn, returning early with ctx's error if ctx ends first (fn
// then goes on in the background, and Close waits for it). The zk
// client's calls take no context.
func (d *Driver) call(ctx context.Context, fn func() error) error {
	if ctx.Done() == nil {
		return fn()
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	res := make(chan error, 1)
	d.bg.Go(func() { res <- fn() })
	select {
	case err := <-res:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// zkLogger passes the zk client's messages to the driver's logger.
type zkLogger struct{ l *slog.Logger }

// Printf implements zk.Logger.
func (z zkLogger) Printf(format string, args ...any) {
	if z.l.Enabled(context.Background(), slog.LevelDebug) {
		z.l.Debug("zk: " + fmt.Sprintf(format, args...))
	}
}
