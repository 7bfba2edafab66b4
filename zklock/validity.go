package zklock

import (
	"sync/atomic"
	"time"
)

// This file holds the session's validity: how long the driver may say its
// locks are held, and how Grant.Check and the watchdog enforce it.

// confirmedAt records that the leader touched the session after t, and
// moves the session's validity to t + granted − granted/10.
//
// Why that is sound. The leader alone expires sessions: no earlier than
// the session timeout after it last touched one (its expiry queue rounds
// up to the next tick). It touches a session when the client is connected
// to it, and otherwise only when a follower's reply to its ping lists the
// session among those the follower's clients touched since its previous
// reply; requests a follower forwards do not touch it, and a follower cut
// off from the leader goes on answering pings on its own. The leader pings
// each follower every tick/2, and tick ≤ timeout/2 (the server grants no
// less than two ticks unless minSessionTimeout is set lower). So, on one
// connection to one server (trackedConn):
//
//  1. a successful reply to a request sent at s_i and read at r_i means
//     the server touched the session in its own table in between;
//  2. a request m the leader must answer (sync, a write), sent at least
//     the report gap (3/10 of the timeout, more than tick/2) after r_i,
//     is answered after the leader sent a ping, later than r_i, that the
//     server handled before m's answer (the leader's stream to the server
//     is in order): the server's reply to that ping, listing the session,
//     went out before m's answer reached the client;
//  3. a request j the leader must answer, sent after m's answer arrived,
//     reaches the leader behind that ping reply (the server's stream to
//     the leader is in order too); so j's answer proves that the leader
//     touched the session after s_i.
//
// The handshake proves it directly (see greeted). A client on the leader,
// or on a standalone server, is touched by every request: the rule holds,
// conservatively. The margin covers the clocks' rates and the time the
// leader's own scheduling can add to its ping period.
func (s *session) confirmedAt(t time.Duration) {
	storeMax(&s.confirmed, int64(t))
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

// trust returns how much longer the session can be trusted to exist: until
// shortly before the earliest instant at which the leader could expire it.
// ok is false before the first handshake.
func (s *session) trust() (left time.Duration, ok bool) {
	v := time.Duration(s.valid.Load())
	if v == 0 {
		return 0, false
	}
	return v - s.clock(), true
}

// watch, the watchdog timer's function, ends the session when its
// validity is over, and otherwise sets itself for that instant.
func (s *session) watch() {
	if s.ended() {
		return
	}
	left, _ := s.trust()
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
