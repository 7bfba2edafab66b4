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

// NotTLS tells whether err, from a TLS handshake with addr, shows a
// server that does not speak TLS: it answered the client's hello with
// something that is no TLS record. It returns the error to report then,
// naming addr and, as hint, what to use instead; nil otherwise.
func NotTLS(addr string, err error, hint string) error {
	var rh tls.RecordHeaderError
	if !errors.As(err, &rh) {
		return nil
	}
	return fmt.Errorf("the server at %s does not speak TLS (%s): %w", addr, hint, err)
}

// AnswersPlain reports whether the server at addr answers hello, sent on
// a plain connection, within timeout with something that is no TLS
// record: a plain server of the protocol that hello starts. A server
// that waits for more of a TLS client's hello, as Redis does, answers no
// TLS handshake, and this tells it from a silent one.
func AnswersPlain(addr string, hello []byte, timeout time.Duration) bool {
	raw, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return false
	}
	defer raw.Close()
	_ = raw.SetDeadline(time.Now().Add(timeout))
	if _, err := raw.Write(hello); err != nil {
		return false
	}
	var b [1]byte
	if n, _ := raw.Read(b[:]); n == 0 {
		return false
	}
	// 0x15 and 0x16 start a TLS alert and a TLS handshake record.
	return b[0] != 0x15 && b[0] != 0x16
}
