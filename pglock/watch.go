package pglock

import (
	"crypto/tls"
	"encoding/binary"
	"net"

	"github.com/dlockgo/dlock/internal/sockwatch"
)

// newSockWatch returns the watch (see sockwatch) of a held lock's socket
// raw under pgx's connection top (raw itself, or a *tls.Conn over it), so
// that the keeper and Check learn of the session's end (a kill, a restart,
// an idle timeout) within about a round trip. Under TLS the bytes are
// opaque; when top is neither, nothing is watched.
func newSockWatch(raw, top net.Conn) *sockwatch.Watch {
	opaque := false
	switch t := top.(type) {
	case *tls.Conn:
		if t.NetConn() != raw {
			raw = nil
		}
		opaque = true
	default:
		if top != raw {
			raw = nil
		}
	}
	return sockwatch.New(raw, opaque, sessionEnded)
}

// frames is the protocol's framing for sockwatch.Follow: a type byte and
// a length that counts itself but not the type; a FATAL or PANIC
// ErrorResponse ends the session whatever query runs, and the backend
// sends it before it lets the session's locks go. A look while a query
// runs finds it whether pgx has read it or it is still queued behind the
// query's reply.
var frames = sockwatch.Framing{
	Header: 5,
	Len:    func(h []byte) int { return 1 + int(binary.BigEndian.Uint32(h[1:5])) },
	Judge:  7,
	Ends:   fatalFrame,
}

// sessionEnded judges a frame that came while no query ran: an
// ErrorResponse ('E') means the server is ending the session (FATAL) and
// closes the connection next. pgx reads other frames (a notice, a
// ParameterStatus) at the keeper's next ping.
func sessionEnded(frame []byte) bool { return frame[0] == 'E' }

// fatalFrame judges a frame's first bytes: an ErrorResponse ('E', length,
// severity field 'S') of severity FATAL or PANIC ends the session
// whatever the query; an ERROR may be its reply.
func fatalFrame(f []byte) bool {
	return len(f) >= 7 && f[0] == 'E' && f[5] == 'S' && (f[6] == 'F' || f[6] == 'P')
}
