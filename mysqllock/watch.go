package mysqllock

// sessionEnded is the test of a lock's socket watch (sockwatch.New) for
// the first bytes of a packet that came while no statement ran: an error
// packet (3 bytes of length, a sequence number, 0xff) then means that the
// server is closing the connection (KILL, a shutdown, wait_timeout, at
// which MySQL 8 says why). The protocol sends nothing else unprompted:
// other bytes, or any under TLS or compression (the watch's opaque), the
// keep-alive loop reads with a check at once.
func sessionEnded(frame []byte) bool { return len(frame) >= 5 && frame[4] == 0xff }
