package redislock

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/dlockgo/dlock/internal/tlsprobe"
)

// dialer is the go-redis Dialer of the clients that open builds. It
// dials and makes the TLS handshake within the dial's context (go-redis's
// tls.DialWithDialer ignores it during the handshake), names a server that
// does not speak TLS, and, while open checks the client, watches its
// dials: go-redis retries a failed dial (up to 5 per attempt, each command
// attempt redialing, and for Sentinel once more per sentinel query), so a
// refused connection, which no retry mends, would take seconds to report.
type dialer struct {
	timeout time.Duration
	tls     *tls.Config
	hint    string // what to use instead of TLS, for the error

	mu      sync.Mutex
	opening bool
	failed  bool
	stop    context.Context         // ends when the check failed
	end     context.CancelFunc      // ends stop
	cancel  context.CancelCauseFunc // ends the check, with its cause
	listed  []string                // the URL's servers (sentinels, seeds)
	others  bool                    // a refusal by another server (the primary) is definitive
	refused map[string]error
	conns   []net.Conn // dialled during the check
}

// newDialer returns the dialer of a client of the URL scheme.
func newDialer(timeout time.Duration, cfg *tls.Config, scheme string) *dialer {
	d := &dialer{timeout: timeout, tls: cfg, hint: "leave out tls=true"}
	if rest, ok := strings.CutPrefix(scheme, "rediss"); ok {
		d.hint = "use redis" + rest + "://"
	}
	d.stop, d.end = context.WithCancel(context.Background())
	return d
}

// watch starts the watch of open's check: cancel ends it with the cause
// of a definitive failure. A refusal is definitive once every address of
// listed has refused; a refusal by an address not in listed is
// definitive when others is set.
func (d *dialer) watch(cancel context.CancelCauseFunc, listed []string, others bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.opening, d.cancel, d.listed, d.others = true, cancel, listed, others
	d.refused = map[string]error{}
}

// done ends the watch. When the check failed, it closes every connection
// dialled during it and fails every dial still under way and to come,
// so that nothing the failed Open started outlives it (a sentinel that
// accepted and never answered would otherwise hold the client's Close
// until its timeout).
func (d *dialer) done(ok bool) {
	d.mu.Lock()
	conns := d.conns
	d.opening, d.conns, d.cancel, d.refused = false, nil, nil, nil
	d.failed = !ok
	d.mu.Unlock()
	if ok {
		return
	}
	d.end()
	for _, c := range conns {
		_ = c.Close()
	}
}

var errOpenFailed = errors.New("redislock: the client's Open failed")

func (d *dialer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, d.timeout)
	defer cancel()
	defer context.AfterFunc(d.stop, cancel)()
	if d.stop.Err() != nil {
		return nil, errOpenFailed
	}
	nd := &net.Dialer{KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: 30 * time.Second, Interval: 5 * time.Second, Count: 3}}
	c, err := nd.DialContext(ctx, network, addr)
	if err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) {
			d.refusal(addr, err)
		}
		return nil, err
	}
	if d.tls != nil {
		if c, err = d.handshake(ctx, c, addr); err != nil {
			return nil, err
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case d.failed:
		_ = c.Close()
		return nil, errOpenFailed
	case d.opening:
		d.conns = append(d.conns, c)
	}
	return c, nil
}

// handshake makes the TLS handshake on c within ctx.
func (d *dialer) handshake(ctx context.Context, c net.Conn, addr string) (net.Conn, error) {
	cfg := d.tls
	if cfg.ServerName == "" {
		cfg = cfg.Clone()
		cfg.ServerName, _, _ = net.SplitHostPort(addr)
	}
	tc := tls.Client(c, cfg)
	err := tc.HandshakeContext(ctx)
	if err == nil {
		return tc, nil
	}
	_ = c.Close()
	if e := tlsprobe.NotTLS(addr, err, d.hint); e != nil {
		d.definitive(e)
		return nil, e
	}
	d.mu.Lock()
	opening := d.opening
	d.mu.Unlock()
	// A plain Redis reads a TLS client's hello as the start of an inline
	// command and waits for its end: the handshake times out. Open asks
	// whether the server answers a plain PING.
	if opening && ctx.Err() != nil && d.stop.Err() == nil &&
		tlsprobe.AnswersPlain(addr, []byte("PING\r\n"), min(d.timeout, time.Second)) {
		e := fmt.Errorf("the server at %s does not speak TLS (%s): it answers a plain PING, and its TLS handshake timed out: %w", addr, d.hint, err)
		d.definitive(e)
		return nil, e
	}
	return nil, err
}

// refusal records that addr refused a connection, and ends the check
// when that is definitive.
func (d *dialer) refusal(addr string, err error) {
	d.mu.Lock()
	if !d.opening {
		d.mu.Unlock()
		return
	}
	d.refused[addr] = err
	var cause error
	switch {
	case !slices.Contains(d.listed, addr):
		if d.others {
			cause = fmt.Errorf("%s refused the connection: %w", addr, err)
		}
	case len(d.listed) == 1:
		cause = fmt.Errorf("%s refused the connection (no server listens there): %w", addr, err)
	case !slices.ContainsFunc(d.listed, func(a string) bool { return d.refused[a] == nil }):
		cause = fmt.Errorf("every server listed (%s) refused the connection: %w", strings.Join(d.listed, ", "), err)
	}
	d.mu.Unlock()
	if cause != nil {
		d.definitive(cause)
	}
}

// definitive ends the check with cause.
func (d *dialer) definitive(cause error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.opening && d.cancel != nil {
		d.cancel(definitiveError{cause})
	}
}

// definitiveError is the cause with which the dialer ends open's check.
type definitiveError struct{ error }

func (e definitiveError) Unwrap() error { return e.error }
