package natslock

import (
	"strconv"
	"strings"
	"time"
)

// record is what a held lock's key holds, as text:
//
//	<owner> <token> <ttl>[\n<value>]
//
// owner is the acquisition's owner value; token its fencing token, or 0
// in the message that took the lock, whose own revision is the token (the
// server assigns it on store, so the message cannot carry it); ttl the TTL
// the key was written with, in whole seconds as a Go duration ("2s"),
// which waiters and Inspect read (a watch gives values, not headers); and,
// for an election, a newline and the candidate's value.
type record struct {
	owner string
	token uint64
	ttl   time.Duration
	value string
	// election says that value follows, even an empty one.
	election bool
}

// appendRecord appends the text of r to b.
func appendRecord(b []byte, r record) []byte {
	b = append(b, r.owner...)
	b = append(b, ' ')
	b = strconv.AppendUint(b, r.token, 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(r.ttl/time.Second), 10)
	b = append(b, 's')
	if r.election {
		b = append(b, '\n')
		b = append(b, r.value...)
	}
	return b
}

// parseRecord reads a record written by appendRecord; false for anything
// else (a key written by another program).
func parseRecord(data []byte) (record, bool) {
	s := string(data)
	var r record
	line, value, hasValue := strings.Cut(s, "\n")
	owner, rest, ok := strings.Cut(line, " ")
	if !ok || owner == "" {
		return record{}, false
	}
	tok, ttl, ok := strings.Cut(rest, " ")
	if !ok {
		return record{}, false
	}
	var err error
	if r.token, err = strconv.ParseUint(tok, 10, 64); err != nil {
		return record{}, false
	}
	if r.ttl, err = time.ParseDuration(ttl); err != nil || r.ttl <= 0 {
		return record{}, false
	}
	r.owner, r.value, r.election = owner, value, hasValue
	return r, true
}

// tokenAt is the record's fencing token, the record being the message at
// revision rev.
func (r record) tokenAt(rev uint64) uint64 {
	if r.token == 0 {
		return rev
	}
	return r.token
}

// storeTTL is the per-key TTL the server keeps a lock of lease TTL ttl
// for: ttl rounded up to whole seconds, at least one. The server counts
// message TTLs in whole seconds and refuses shorter ones; rounding up, not
// down, keeps the key on the store at least as long as the lease is
// believed held.
func storeTTL(ttl time.Duration) time.Duration {
	s := (ttl + time.Second - 1) / time.Second
	return max(s, 1) * time.Second
}
