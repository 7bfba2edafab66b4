package natslock

import (
	"strconv"
	"strings"
	"time"

	"github.com/dlockgo/dlock/driver"
)

// A name becomes one KV key token with each of '.', ':', '@', '+' and '='
// written as '=' and two upper-case hex digits, as quoted-printable does
// (docs/NATS.md, "Names", has examples): keys allow [-/_=.a-zA-Z0-9] and
// '.' splits subjects, so "sem.<name>.*" must not match another name's
// slots. The encoding is injective ('=' always starts an escape) and maps
// a prefix of a name to a prefix of its key, which Inspect relies on.

// escapeByte starts an escape in an encoded name.
const escapeByte = '='

const upperHex = "0123456789ABCDEF"

// EncodeName returns the KV key token that stands for the lock name
// (see docs/NATS.md, "How a lock works"). It expects a valid name
// (dlock.ValidateName); other bytes outside the key alphabet are escaped
// too, so the result is always a valid token.
func EncodeName(name string) string {
	n := 0
	for i := 0; i < len(name); i++ {
		if escaped(name[i]) {
			n++
		}
	}
	if n == 0 {
		return name
	}
	var b strings.Builder
	b.Grow(len(name) + 2*n)
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !escaped(c) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte(escapeByte)
		b.WriteByte(upperHex[c>>4])
		b.WriteByte(upperHex[c&0xF])
	}
	return b.String()
}

// escaped reports whether EncodeName writes c as an escape: every byte
// but letters, digits, '-', '_' and '/', the name bytes that keys have
// and that do not split a subject.
func escaped(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '-', c == '_', c == '/':
		return false
	}
	return true
}

// DecodeName returns the lock name that EncodeName turned into token, and
// false when token is not such an encoding (a bad escape, a byte outside
// the key alphabet, an escape of a byte that needs none).
func DecodeName(token string) (string, bool) {
	var b strings.Builder
	b.Grow(len(token))
	for i := 0; i < len(token); i++ {
		c := token[i]
		if c != escapeByte {
			if escaped(c) {
				return "", false
			}
			b.WriteByte(c)
			continue
		}
		if i+2 >= len(token) {
			return "", false
		}
		v, err := strconv.ParseUint(token[i+1:i+3], 16, 8)
		if err != nil || token[i+1] != upperHex[v>>4] || token[i+2] != upperHex[v&0xF] || !escaped(byte(v)) {
			return "", false
		}
		b.WriteByte(byte(v))
		i += 2
	}
	return b.String(), true
}

// The first token of every key the driver writes names the kind of lock,
// so that the mutex, the semaphore and the election called x never share
// a key.
const (
	kindMutex     = "mutex"
	kindSemaphore = "sem"
	kindElection  = "elect"
)

// A lockReq is a driver.Request resolved once, where a call enters the
// driver (Driver.resolve): the per-key TTL it writes, and as methods the
// keys it may take, made only by the calls that need them (a release
// finds its key in the hold).
type lockReq struct {
	driver.Request
	ttl time.Duration // the per-key TTL, storeTTL(TTL)
}

// keyBase is the key of the mutex or the election called name, or what
// starts the keys of the semaphore's permit slots: sem.<name>.<slot>.
func keyBase(m driver.Mode, name string) string {
	switch m {
	case driver.Leader:
		return kindElection + "." + EncodeName(name)
	case driver.Permit:
		return kindSemaphore + "." + EncodeName(name) + "."
	}
	return kindMutex + "." + EncodeName(name)
}

// keys returns the keys q may take: the mutex's or the election's one
// key, or the Limit permit slots of a semaphore.
func (q *lockReq) keys() []string {
	base := keyBase(q.Mode, q.Name)
	if q.Mode != driver.Permit {
		return []string{base}
	}
	k := make([]string, q.Limit)
	for i := range k {
		k[i] = base + strconv.Itoa(i)
	}
	return k
}

// filter is the subject filter of a watch of keys, q's keys.
func (q *lockReq) filter(keys []string) string {
	if q.Mode == driver.Permit {
		return keyBase(q.Mode, q.Name) + "*"
	}
	return keys[0]
}

// record returns the record q writes, with token (0 in the acquiring
// write, whose revision is the token) and, for an election, value.
func (q *lockReq) record(token uint64, value string) []byte {
	b := make([]byte, 0, 64+len(value))
	b = append(b, q.Owner...)
	b = append(b, ' ')
	b = strconv.AppendUint(b, token, 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(q.ttl/time.Second), 10)
	b = append(b, 's')
	if q.Mode == driver.Leader {
		b = append(b, '\n')
		b = append(b, value...)
	}
	return b
}

// parsedKey is a key the driver writes, taken apart.
type parsedKey struct {
	mode driver.Mode
	name string
	slot int // the permit's slot, for a semaphore
}

// parseKey takes a key apart; false for a key the driver does not write.
func parseKey(key string) (parsedKey, bool) {
	kind, rest, ok := strings.Cut(key, ".")
	if !ok {
		return parsedKey{}, false
	}
	var p parsedKey
	switch kind {
	case kindMutex:
		p.mode = driver.Exclusive
	case kindElection:
		p.mode = driver.Leader
	case kindSemaphore:
		p.mode = driver.Permit
		tok, slot, ok := strings.Cut(rest, ".")
		if !ok {
			return parsedKey{}, false
		}
		n, err := strconv.Atoi(slot)
		if err != nil || n < 0 || strconv.Itoa(n) != slot {
			return parsedKey{}, false
		}
		rest, p.slot = tok, n
	default:
		return parsedKey{}, false
	}
	name, ok := DecodeName(rest)
	if !ok {
		return parsedKey{}, false
	}
	p.name = name
	return p, true
}

// record is what a held lock's key holds, as text:
//
//	<owner> <token> <ttl>[\n<value>]
//
// owner is the acquisition's owner; token its fencing token, or 0 in the
// message that took the lock, whose revision, assigned on store, is the
// token; ttl the key's TTL in whole seconds as a Go duration ("2s"), for
// waiters and Inspect (a watch gives values, not headers); and, for an
// election, a newline and the candidate's value.
type record struct {
	owner string
	token uint64
	ttl   time.Duration
	value string // an election's candidate's
}

// parseRecord reads a record written by lockReq.record; false for anything
// else (a key written by another program).
func parseRecord(data []byte) (record, bool) {
	s := string(data)
	var r record
	line, value, _ := strings.Cut(s, "\n")
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
	r.owner, r.value = owner, value
	return r, true
}

// storeTTL is the per-key TTL the server keeps a lock of lease TTL ttl
// for: ttl rounded up to whole seconds (the server's unit and least), so
// that the key stays at least as long as the lease is believed held.
func storeTTL(ttl time.Duration) time.Duration {
	s := (ttl + time.Second - 1) / time.Second
	return max(s, 1) * time.Second
}
