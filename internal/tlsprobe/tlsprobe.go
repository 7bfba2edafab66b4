// Package tlsprobe tells why a TLS connection to a store fails, for the
// error of an Open whose client library reports only a timeout.
package tlsprobe

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"time"
)

// Why dials addr with cfg and returns why TLS fails there: the handshake's
// error (an unknown authority, a name mismatch), or the alert the server
// sends right after it (a client certificate required or refused); nil
// when the server accepts the connection within timeout, or cannot be
// reached at all (the caller's own error says that).
func Why(addr string, cfg *tls.Config, timeout time.Duration) error {
	raw, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil
	}
	defer raw.Close()
	c := cfg.Clone()
	if c.ServerName == "" {
		host, _, _ := net.SplitHostPort(addr)
		c.ServerName = host
	}
	conn := tls.Client(raw, c)
	_ = conn.SetDeadline(time.Now().Add(timeout))
	if err := conn.Handshake(); err != nil {
		return fmt.Errorf("TLS with %s: %w", addr, err)
	}
	// In TLS 1.3 the server checks the client's certificate after the
	// client's handshake is done, and says so in an alert.
	_ = conn.SetReadDeadline(time.Now().Add(min(timeout, 300*time.Millisecond)))
	var b [1]byte
	if _, err := conn.Read(b[:]); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			return fmt.Errorf("TLS with %s: %w", addr, err)
		}
	}
	return nil
}

// SpeaksTLS reports whether the server at addr completes a TLS handshake
// within timeout (its certificate unchecked): a plain client's timeout
// there means the URL should ask for TLS.
func SpeaksTLS(addr string, timeout time.Duration) bool {
	raw, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return false
	}
	defer raw.Close()
	conn := tls.Client(raw, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // only asks whether TLS is spoken
	_ = conn.SetDeadline(time.Now().Add(timeout))
	return conn.Handshake() == nil
}
