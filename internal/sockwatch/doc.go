// Package sockwatch watches the socket of a held lock's database
// connection while no statement runs on it, so that the backend learns of
// the server closing the connection (the session killed or terminated, a
// restart, an idle timeout) from the socket itself, within about a round
// trip, rather than at its next keep-alive check.
//
// A Watch never reads: every look is a recv with MSG_PEEK, leaving the
// bytes for the driver. A look finds one of three things (Verdict):
// nothing to read; the server hung up (end of stream, a socket error, or,
// where the bytes are the protocol's own frames, a frame the backend's
// ended function says a server sends unprompted only as it ends the
// session); or other bytes, which only the driver can judge (anything
// under TLS or compression, a notice) unless the TCP state says the server
// closed the connection: the backend then runs a statement, which reads
// them and fails if the session has ended.
//
// One goroutine of the backend waits in Wait for the socket to become
// readable; Take takes the socket from it before a statement, and Resume
// gives it back, since the driver and the watch must not read at once.
// Look, for the lock's Check, does not wait for that goroutine: one atomic
// word (a busy bit and the looks in flight) keeps its peek away from a
// running statement's reply and lets looks run side by side; during a
// statement, Look reads only the TCP state (getsockopt TCP_INFO), which
// shows a server's close (FIN or reset) whatever bytes came before, and,
// where the driver reads through a Stream (Follow), judges the frames
// still queued from where the driver's reads left off; a Stream also
// notes a frame that ends the session as the driver reads it. It does
// not allocate. Take looks too, so that no statement starts on a
// connection a look found the server had closed.
//
// Sockets are watched on Linux only; elsewhere a Watch watches nothing
// (Watched reports false) and the backends rely on their keep-alive checks.
package sockwatch
