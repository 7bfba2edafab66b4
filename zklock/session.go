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

// A session is one ZooKeeper session and its zk.Conn, trusted only while
// the ensemble's leader cannot have expired it. It ends for good when the
// server reports it expired, when that validity runs out (see
// confirmedAt) or when the driver closes; ending closes the zk.Conn, so
// that a session given up on cannot come back to life with its locks.
type session struct {
	d     *Driver
	conn  *zk.Conn
	start time.Time // the base of the durations below (monotonic)

	// heard is the send time of the latest request a server answered, for
	// the tests: it says nothing of the leader, which alone expires
	// sessions (a follower cut off from it answers pings for syncLimit ×
	// tickTime).
	heard atomic.Int64 // time.Duration since start
	// valid is the end of the session's validity (see confirmedAt), which
	// Grant.Check and the watchdog compare the clock with.
	valid   atomic.Int64 // time.Duration since start; 0 before the handshake
	granted atomic.Int64 // session timeout granted by the server; 0 before the handshake
	id      atomic.Int64

	established chan struct{} // closed at the first handshake
	authed      chan struct{} // closed once every Auth was accepted
	estOnce     sync.Once
	watchdog    *time.Timer           // ends the session when valid passes (watch)
	checkFn     func(time.Time) error // s.check, made once: Grant.Check of every lock

	mu  sync.Mutex // guards conn while dialing, and tcp
	tcp net.Conn   // the current TCP connection (for the crash hook)

	// dialErr is why the last connection attempt failed (nil after one
	// succeeded): what ready reports when its wait ends first.
	dialErr atomic.Pointer[error]

	zxid atomic.Int64 // the newest zxid a reply carried (see trackedConn.withZxid)

	done    chan struct{} // closed when the session ends
	endOnce sync.Once
	over    atomic.Bool // set when the session ends, before done closes
	endErr  error       // the error of operations the end cut short; set before over
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
	// The zk client's own messages go to the driver's logger, at Debug.
	zkLog := slog.NewLogLogger(d.opt.Logger.Handler(), slog.LevelDebug)
	zkLog.SetPrefix("zk: ")
	s.mu.Lock()
	defer s.mu.Unlock()
	conn, _, err := zk.Connect(d.servers, d.opt.SessionTimeout,
		zk.WithDialer(s.dialTCP), zk.WithEventCallback(s.event),
		zk.WithLogger(zkLog), zk.WithLogInfo(false))
	if err != nil {
		return nil, fmt.Errorf("zklock: connect to %v: %w", d.servers, err)
	}
	s.conn = conn
	d.bg.Go(s.monitor)
	d.bg.Go(s.authenticate)
	return s, nil
}

// authenticate sends the driver's Auth before any other request (they
// wait for authed: see Driver.ready), then closes authed; the zk.Conn
// sends them again after each reconnection. A refusal ends the session
// with an error naming the identity.
func (s *session) authenticate() {
	for _, a := range s.d.opt.Auth {
		if err := s.conn.AddAuth(a.Scheme, []byte(a.Credential)); err != nil {
			switch e := s.dialErr.Load(); {
			case s.ended():
			case e != nil && transient(err):
				s.end(fmt.Errorf("zklock: could not connect to authenticate as %v: %w (%w)", a, *e, err))
			default:
				s.end(fmt.Errorf("zklock: authentication as %v refused: %w", a, err))
			}
			return
		}
	}
	close(s.authed)
}

// dialTCP is the zk.Conn's dialer: it wraps every connection in a
// trackedConn (see confirmedAt).
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
	if cfg := s.d.tlsConfig(addr); cfg != nil {
		// ZooKeeper's secure client port: the handshake within the dial's
		// timeout.
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
		c = tc
	}
	s.dialErr.Store(nil)
	return newTrackedConn(c, s), nil
}

// tlsConfig returns the TLS configuration of a connection to the server
// at addr, whose certificate is checked against addr's host unless
// Options.TLS names the server; nil without TLS.
func (d *Driver) tlsConfig(addr string) *tls.Config {
	cfg := d.opt.TLS
	if cfg != nil && cfg.ServerName == "" {
		cfg = cfg.Clone()
		cfg.ServerName, _, _ = net.SplitHostPort(addr)
	}
	return cfg
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
			s.d.opt.Logger.Warn("zklock: disconnected from ZooKeeper; locks are kept unless the session times out",
				"server", ev.Server, "session", s.id.Load())
		}
	case zk.StateHasSession:
		s.d.opt.Logger.Debug("zklock: connected", "server", ev.Server, "session", s.id.Load())
	}
}

// clock returns the session's time: the monotonic time since it started.
func (s *session) clock() time.Duration { return time.Since(s.start) }

// greeted records a connect response: the session's id and granted
// timeout. The handshake is contact the leader confirmed: a follower
// answers it only once the leader revalidated (touched) or created the
// session, after the request was sent.
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

func (s *session) heardAt(sent time.Duration) { storeMax(&s.heard, int64(sent)) }

// monitor is the session's one goroutine. From the first handshake on, it
// arms the watchdog and sends a sync every syncEvery, so that contact the
// leader confirms keeps coming while the driver sends nothing else
// (trackedConn counts the replies, like those to the driver's writes).
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
		// A server cut off from its leader never answers a sync: the
		// watchdog ends the session, and the zk.Conn's close returns it.
		_, _ = s.conn.Sync("/")
	}
}

// end ends the session once: its locks are lost, and its zk.Conn is closed
// so that it cannot renew the session behind the driver's back.
func (s *session) end(cause error) {
	s.endOnce.Do(func() {
		s.endErr = fmt.Errorf("%w: %w", errSessionEnded, cause)
		s.over.Store(true)
		s.watchdog.Stop()
		close(s.done)
		s.d.loseSession(s)
		if !errors.Is(cause, driver.ErrClosed) {
			s.d.opt.Logger.Warn("zklock: session ended; its locks are lost", "session", s.id.Load(), "cause", cause)
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

func (s *session) ended() bool { return s.over.Load() }

func (s *session) isEstablished() bool {
	select {
	case <-s.established:
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

// errSessionEnded wraps the cause of a session's end in operation errors.
var errSessionEnded = errors.New("zklock: session ended")

// transient reports whether err is a connection error that a retry on the
// same session can overcome: the zk.Conn reconnects (to another server if
// need be) and keeps the session unless it expires. It returns the
// network's errors, unwrapped, when sending a request fails.
func transient(err error) bool {
	if errors.Is(err, zk.ErrConnectionClosed) || errors.Is(err, zk.ErrNoServer) {
		return true
	}
	_, isNet := err.(net.Error)
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
	select {
	case <-time.After(d):
		return true
	case <-done:
		return false
	}
}

// call runs fn, which takes no context (nor do the zk client's calls),
// returning ctx's error if ctx ends first: fn then goes on in the
// background, and Close waits for it.
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

// confirmedAt records that the leader touched the session after t: the
// session's validity, how long the driver may say its locks are held,
// moves to t + granted − granted/10.
//
// Why that is sound (docs/ZOOKEEPER.md, "Validity", has the proof): the
// leader alone expires sessions, no earlier than the timeout after it last
// touched one, and hears of one behind a follower only from the
// follower's replies to its pings (every tick/2 ≤ timeout/4). On one
// connection (trackedConn), a reply to a request sent at s_i, then a
// request the leader must answer sent a report gap later, then another
// sent after that one's answer, prove the leader touched the session after
// s_i. The handshake proves it directly (see greeted). The margin covers
// the clocks' rates and the time the leader's own scheduling can add to
// its ping period.
func (s *session) confirmedAt(t time.Duration) {
	g := time.Duration(s.granted.Load())
	storeMax(&s.valid, int64(t+g-g/10))
}

// storeMax sets v to x if x is greater.
func storeMax(v *atomic.Int64, x int64) {
	for {
		h := v.Load()
		if x <= h || v.CompareAndSwap(h, x) {
			return
		}
	}
}

// reportGap is the least time between a reply and a request the leader
// must answer for the reply's touch to count as reported (step 2 of
// confirmedAt): more than the leader's ping period, tick/2 ≤ timeout/4.
func (s *session) reportGap() time.Duration { return time.Duration(s.granted.Load()) * 3 / 10 }

// syncEvery is the period of the monitor's syncs. With it, contact is
// confirmed about every sixth of the timeout, each time from about half
// a timeout back (a sync's evidence is the touch of the one a report gap
// before it, proved by the next): the validity keeps about a quarter of
// the timeout ahead of the clock.
func (s *session) syncEvery() time.Duration { return time.Duration(s.granted.Load()) / 6 }

// watch, the watchdog timer's function, ends the session when its
// validity is over (shortly before the earliest instant at which the
// leader could expire it), and otherwise sets itself for that instant.
func (s *session) watch() {
	if s.ended() {
		return
	}
	left := time.Duration(s.valid.Load()) - s.clock()
	if left <= 0 {
		s.end(errNoContact)
		return
	}
	s.watchdog.Reset(left)
}

// check is the Grant.Check of the session's locks: nil while the session
// may still exist at now, else the error of its end, ending it first if
// its validity is over (so that the answer stays an error). It does not
// allocate on the nil path: two atomic loads and a clock comparison.
func (s *session) check(now time.Time) error {
	if s.over.Load() {
		return s.endErr
	}
	if now.Sub(s.start) >= time.Duration(s.valid.Load()) {
		s.end(errNoContact)
		return s.endErr
	}
	return nil
}
