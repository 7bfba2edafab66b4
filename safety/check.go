package safety

import (
	"cmp"
	"reflect"
	"slices"
	"strconv"
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
	// Call is when the acquire call started; WriteCall, when the write to
	// the resource was sent (Exit is when its reply came); Released, when
	// the release call returned; Write, the write's outcome ("ok",
	// "stale" for refused, or an error). Zero or empty when not recorded;
	// the linearizability check (CheckLinear) needs them.
	Call      int64  `json:"call,omitempty"`
	WriteCall int64  `json:"wcall,omitempty"`
	Released  int64  `json:"rel,omitempty"`
	Write     string `json:"w,omitempty"`
	// Lost is set when the client's lease had told it the lock was lost
	// (Lease.Err not nil) by Exit.
	Lost bool `json:"lost"`
	// LostAt, when not zero, is when the client was told (its lease's Done
	// channel closed), in Unix nanoseconds, at or before Exit.
	LostAt int64 `json:"lostAt,omitempty"`
	// HeldAt, when not zero, is the time read just before the client's
	// last look at its lease (Err) that found it held, at or before Exit:
	// the last moment the client is known to have been told it held the
	// lock. The worker looks every 2ms.
	HeldAt int64 `json:"heldAt,omitempty"`
	// Mode is what the section took: "read" or "write" (a readers-writer
	// lock), "permit" (one of Limit permits of a semaphore), "leader" (an
	// election), or empty for a mutex.
	Mode  string `json:"m,omitempty"`
	Limit int    `json:"n,omitempty"`
}

// heldUntil returns the last instant the client's lease is known to have
// said held: the look at HeldAt, or, without HeldAt, just before LostAt
// (Done open), or, without either, Exit (when it was lost by then is not
// known).
func (a Acquisition) heldUntil() int64 {
	switch {
	case a.HeldAt != 0:
		return a.HeldAt
	case a.LostAt != 0:
		return a.LostAt - 1
	default:
		return a.Exit
	}
}

// heldAfter reports whether the client's lease was seen held after t.
func (a Acquisition) heldAfter(t int64) bool { return a.heldUntil() > t }

// A Write is one entry of the fenced resource's log, in the order the
// resource applied or refused the writes: a write by Client carrying
// Token, and whether the resource accepted it.
type Write struct {
	Client   int    `json:"c"`
	Token    uint64 `json:"t"`
	Accepted bool   `json:"ok"`
	// At is when the resource decided, in Unix nanoseconds (0: not
	// recorded).
	At int64 `json:"at,omitempty"`
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
	// was seen held (HeldAt) after the other client's acquire call had
	// returned: two clients told at once that they held the lock. A
	// paused holder makes no looks while it is stopped, so its pause does
	// not count here unless a look after it found the lease still held.
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
	// Excess counts the grants that broke the kind's bound while other
	// clients' leases were still seen held (as for StillHeld): a writer
	// beside any holder, a reader beside a writer, a permit beyond the
	// semaphore's limit, a second leader or mutex holder. For a mutex it
	// counts grants where StillHeld counts pairs.
	Excess int
	// BadObservations counts leaders shown by Observe that no campaign
	// was granted (value and token) and no campaign of theirs can explain,
	// and tokens that went back in one observer's sequence; Abandoned
	// counts the leaders shown that a campaign left in the store while
	// giving them up (see CheckObserved).
	BadObservations, Abandoned int
	// NotLinearizable and LinearUnknown count the runs whose history
	// CheckLinear found not linearizable, or could not decide in time.
	NotLinearizable, LinearUnknown int
}

// Add returns the sum of two results, field by field, for totals over
// several runs.
func (r Result) Add(o Result) Result {
	sum, other := reflect.ValueOf(&r).Elem(), reflect.ValueOf(o)
	for i := range sum.NumField() {
		sum.Field(i).SetInt(sum.Field(i).Int() + other.Field(i).Int())
	}
	return r
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
				if a.heldAfter(b.Enter) {
					res.StillHeld++
				}
			}
		}
	}

	res.Excess = excess(s)

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

// excess counts the grants, among acquisitions sorted by Enter, at which
// the holders still seen held and the new one break the kind's bound.
func excess(s []Acquisition) int {
	n := 0
	for i, b := range s {
		var held []Acquisition
		for _, a := range s[:i] {
			if a.Client != b.Client && a.heldAfter(b.Enter) {
				held = append(held, a)
			}
		}
		if len(held) == 0 {
			continue
		}
		switch b.Mode {
		case "read":
			if slices.ContainsFunc(held, func(a Acquisition) bool { return a.Mode != "read" }) {
				n++
			}
		case "permit":
			if len(held)+1 > b.Limit {
				n++
			}
		default: // write, leader, mutex: nobody else
			n++
		}
	}
	return n
}

// An Observation is one leader an observer's Observe channel showed.
type Observation struct {
	Client int    // the observer
	Value  string // the leader's value
	Token  uint64 // the leader's token; 0: nobody leads
	At     int64  // Unix nanoseconds
}

// A Call is an acquire call a client started at At (Unix nanoseconds),
// whether it was granted or failed.
type Call struct {
	Client int
	At     int64
}

// CheckObserved counts the observations that show a leader no campaign
// was granted (by value and token), and the ones whose token is lower
// than one the same observer showed before: bad, both. It counts apart,
// as abandoned, the leaders no campaign was granted whose value names a
// client that had started a campaign (one of calls) before the
// observation: a candidate's key the store made leader while its
// campaign was giving it up (its session ended, its answer was lost, its
// context ended), which leads for observers until it is deleted or its
// lease expires. Observe reports the store's leader, so these are
// correct; a leader with a token granted to someone else, or with a value
// no client had campaigned with by then, is not.
func CheckObserved(acqs []Acquisition, calls []Call, obs []Observation) (bad, abandoned int) {
	granted := map[uint64]string{}
	first := map[string]int64{} // each client's first campaign call
	note := func(client int, at int64) {
		v := strconv.Itoa(client)
		if f, ok := first[v]; !ok || at < f {
			first[v] = at
		}
	}
	for _, a := range acqs {
		if a.Mode == "leader" {
			granted[a.Token] = strconv.Itoa(a.Client)
			note(a.Client, a.Call)
		}
	}
	for _, c := range calls {
		note(c.Client, c.At)
	}
	last := map[int]uint64{}
	for _, o := range obs {
		if o.Token == 0 {
			continue
		}
		v, ok := granted[o.Token]
		switch {
		case ok && v != o.Value:
			bad++
		case !ok:
			if f, campaigned := first[o.Value]; campaigned && f < o.At {
				abandoned++
			} else {
				bad++
			}
		}
		if o.Token < last[o.Client] {
			bad++
		}
		last[o.Client] = max(last[o.Client], o.Token)
	}
	return bad, abandoned
}
