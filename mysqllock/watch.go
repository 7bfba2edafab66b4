package mysqllock

// sessionEnded judges, for a lock's socket watch (sockwatch.New), a
// packet that came while no statement ran: an error packet (3 bytes of
// length, a sequence number, 0xff) means the server is closing the
// connection (KILL, a shutdown, wait_timeout, where MySQL 8 says why).
// Nothing else comes unprompted: other bytes, or any under TLS or
// compression (opaque), the keeper reads with a check at once.
func sessionEnded(frame []byte) bool { return len(frame) >= 5 && frame[4] == 0xff }
