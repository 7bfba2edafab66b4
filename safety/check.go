package safety

import (
	"cmp"
	"slices"
)

// An Acquisition is one critical section of one client, as the client
// saw it: it held the lock with Token from Enter (when the acquire call
// returned) to Exit (when it was done with the resource, before
// releasing). Enter and Exit are wall-clock times in Unix nanoseconds,
// taken on one machine, so that the sections of several processes can be
// compared.
type Acquisition struct {
	Client int    `json:"c"`
	Token  uint64 `json:"t"`
	Enter  int64  `json:"enter"`
	Exit   int64  `json:"exit"`
	// Lost is set when the client's lease had told it the lock was lost
	// (Lease.Err not nil) by Exit.
	Lost bool `json:"lost"`
	// LostAt, when not zero, is when the client was told (its lease's Done
	// channel closed), in Unix nanoseconds, at or before Exit.
	LostAt int64 `json:"lostAt,omitempty"`
}

// toldBy reports whether the client had been told by t that its lock was
// lost. Without LostAt, only Exit is known: told by t if t >= Exit and
// Lost.
func (a Acquisition) toldBy(t int64) bool {
	if a.LostAt != 0 {
		return a.LostAt <= t
	}
	return a.Lost && t >= a.Exit
}

// A Write is one entry of the fenced resource's log, in the order the
// resource applied or refused the writes: a write by Client carrying
// Token, and whether the resource accepted it.
type Write struct {
	Client   int    `json:"c"`
	Token    uint64 `json:"t"`
	Accepted bool   `json:"ok"`
}

// Result counts what Check found in a history.
type Result struct {
	// Acquisitions is the number of critical sections checked.
	Acquisitions int
	// Writes and Rejected count the resource's log and its refusals.
	Writes, Rejected int
	// Overlaps counts pairs of critical sections of different clients
	// whose intervals intersect: each is a moment when the lock let two
	// clients believe they held it.
	Overlaps int
	// Unnoticed counts the overlaps of which neither client had been
	// told, by Exit, that its lock was lost: the lock's own failures, as
	// opposed to a holder that kept working after its lease said the lock
	// was gone (which dlock reports but cannot prevent).
	Unnoticed int
	// StillHeld counts the overlaps in which the earlier holder's lease
	// still said held (its Done channel open) at the moment the other
	// client was granted the lock: two clients told at once that they
	// held it. It is the strict measure for a holder that runs on (a
	// partition, a clock fault); a paused holder cannot be told until it
	// runs again, so its overlaps count here too.
	StillHeld int
	// StaleAccepted counts writes the resource accepted although their
	// token was lower than a token it had accepted before: the writes a
	// fencing guard exists to refuse.
	StaleAccepted int
	// SharedAccepted counts writes the resource accepted with a token
	// equal to the highest it had accepted, from a different client than
	// the one that first wrote with it: two clients granted the same token
	// (a token regression), which a guard admitting equal tokens (as
	// fence guards do, so that one holder may write several times) cannot
	// tell apart.
	SharedAccepted int
	// Regressions counts acquisitions, in the order they were granted
	// (by Enter), whose token is not greater than the token of an earlier
	// acquisition.
	Regressions int
}

// Add returns the sum of two results, for totals over several runs.
func (r Result) Add(o Result) Result {
	return Result{
		Acquisitions:   r.Acquisitions + o.Acquisitions,
		Writes:         r.Writes + o.Writes,
		Rejected:       r.Rejected + o.Rejected,
		Overlaps:       r.Overlaps + o.Overlaps,
		Unnoticed:      r.Unnoticed + o.Unnoticed,
		StillHeld:      r.StillHeld + o.StillHeld,
		StaleAccepted:  r.StaleAccepted + o.StaleAccepted,
		SharedAccepted: r.SharedAccepted + o.SharedAccepted,
		Regressions:    r.Regressions + o.Regressions,
	}
}

// Check counts the violations in one run's history: the acquisitions of
// every client (in any order) and the resource's log (in its order). It
// is an exact check of a fenced mutex: the lock's part is that no two
// clients' sections overlap and that tokens increase in grant order; the
// resource's part is that no accepted write carries a token below one
// accepted before it.
func Check(acqs []Acquisition, writes []Write) Result {
	res := Result{Acquisitions: len(acqs), Writes: len(writes)}
	s := slices.Clone(acqs)
	slices.SortFunc(s, func(a, b Acquisition) int {
		return cmp.Or(cmp.Compare(a.Enter, b.Enter), cmp.Compare(a.Token, b.Token))
	})

	var highest uint64
	for i, a := range s {
		if i > 0 && a.Token <= highest {
			res.Regressions++
		}
		highest = max(highest, a.Token)
		// The sections after a in Enter order that start before a ends.
		for _, b := range s[i+1:] {
			if b.Enter >= a.Exit {
				break
			}
			if b.Client != a.Client {
				res.Overlaps++
				if !a.Lost && !b.Lost {
					res.Unnoticed++
				}
				if !a.toldBy(b.Enter) {
					res.StillHeld++
				}
			}
		}
	}

	var accepted uint64
	writer := -1 // the client that first wrote with token accepted
	for _, w := range writes {
		switch {
		case !w.Accepted:
			res.Rejected++
		case w.Token < accepted:
			res.StaleAccepted++
		case w.Token > accepted:
			accepted, writer = w.Token, w.Client
		case w.Client != writer:
			res.SharedAccepted++
		}
	}
	return res
}
