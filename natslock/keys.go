package natslock

import (
	"strconv"
	"strings"

	"github.com/dlockgo/dlock/driver"
)

// NATS KV keys allow the bytes [-/_=.a-zA-Z0-9], and '.' separates the
// tokens of the subject a key becomes. dlock names also allow ':', '@'
// and '+', and their '.' must not split a name into tokens (a watch on
// "sem.<name>.*" would then match the slots of another name). So a name is
// written with each of '.', ':', '@', '+' and the escape byte '=' replaced
// by '=' and its two upper-case hex digits, as quoted-printable does:
//
//	orders/42       orders/42
//	job:nightly     job=3Anightly
//	a.b@c+d=e       a=2Eb=40c=2Bd=3De
//
// Every other name byte stands for itself. The encoding is injective (an
// '=' always starts a three-byte escape, and '=' itself is escaped), keeps
// letters, digits, '-', '_' and '/' readable, and maps a prefix of a name
// to a prefix of its key, which Inspect relies on. The encoded name is one
// subject token: it holds no '.'.

// escapeByte starts an escape in an encoded name.
const escapeByte = '='

// needsEscape reports whether name byte c is written as an escape.
func needsEscape(c byte) bool {
	switch c {
	case '.', ':', '@', '+', escapeByte:
		return true
	}
	return false
}

const upperHex = "0123456789ABCDEF"

// EncodeName returns the KV key token that stands for the lock name
// (see the package documentation, Keys). It expects a valid name
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

// escaped reports whether EncodeName writes c as an escape: the name
// bytes keys lack, and anything outside the key alphabet.
func escaped(c byte) bool {
	if needsEscape(c) {
		return true
	}
	return !driver.NameByte(c)
}

// DecodeName returns the lock name that EncodeName turned into token, and
// false when token is not such an encoding (a bad escape, a byte outside
// the key alphabet, an escape of a byte that needs none).
func DecodeName(token string) (string, bool) {
	if strings.IndexByte(token, escapeByte) < 0 {
		for i := 0; i < len(token); i++ {
			if escaped(token[i]) {
				return "", false
			}
		}
		return token, true
	}
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

// mutexKey is the key of the mutex name.
func mutexKey(name string) string { return kindMutex + "." + EncodeName(name) }

// electionKey is the key of the election name.
func electionKey(name string) string { return kindElection + "." + EncodeName(name) }

// semaphoreBase is what starts the keys of the semaphore name's permits.
func semaphoreBase(name string) string { return kindSemaphore + "." + EncodeName(name) + "." }

// slotKey is the key of permit slot i of the semaphore whose keys start
// with base.
func slotKey(base string, i int) string { return base + strconv.Itoa(i) }

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
