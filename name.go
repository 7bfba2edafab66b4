package dlock

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/dlockgo/dlock/driver"
)

// MaxNameLen is the longest valid lock name, in bytes.
const MaxNameLen = 200

// nameBytes marks the bytes a name may hold: driver.NameByte's rule, as a
// table for ValidateName's loop.
var nameBytes = func() (t [utf8.RuneSelf]bool) {
	for c := range t {
		t[c] = driver.NameByte(byte(c))
	}
	return t
}()

// ValidateName reports whether name is a valid lock name, with an error
// wrapping ErrInvalidName when it is not.
//
// A valid name is 1 to MaxNameLen bytes of ASCII letters, digits and the
// characters - _ . : @ + = and /. The slash separates segments: a name
// must not start or end with one, nor hold an empty segment ("a//b") or a
// segment "." or "..". These rules are the same on every backend, so that
// a name means the same lock wherever it is used and maps safely onto
// every store: a Redis key, a ZooKeeper path, an etcd key, a file name.
func ValidateName(name string) error {
	if name == "" {
		return fmt.Errorf("%w: empty", ErrInvalidName)
	}
	if len(name) > MaxNameLen {
		return fmt.Errorf("%w: %d bytes, more than %d", ErrInvalidName, len(name), MaxNameLen)
	}
	// Every allowed byte is ASCII, so the first byte refused starts the
	// first character refused.
	for i := 0; i < len(name); i++ {
		if c := name[i]; c >= utf8.RuneSelf || !nameBytes[c] {
			return badNameChar(name, i)
		}
	}
	for rest := name; ; {
		seg, after, more := strings.Cut(rest, "/")
		switch seg {
		case "":
			return fmt.Errorf("%w: %q: empty segment (leading, trailing or double slash)", ErrInvalidName, name)
		case ".", "..":
			return fmt.Errorf("%w: %q: segment %q is not allowed", ErrInvalidName, name, seg)
		}
		if !more {
			return nil
		}
		rest = after
	}
}

// badNameChar is ValidateName's error for the character of name that
// starts at byte i, which is not allowed or not UTF-8.
func badNameChar(name string, i int) error {
	r, size := utf8.DecodeRuneInString(name[i:])
	if r == utf8.RuneError && size <= 1 {
		return fmt.Errorf("%w: %q: byte %#02x at %d is not UTF-8: a name holds ASCII letters, digits and - _ . : @ + = /",
			ErrInvalidName, name, name[i], i)
	}
	return fmt.Errorf("%w: %q: character %q (%U) at byte %d is not allowed: a name holds ASCII letters, digits and - _ . : @ + = /",
		ErrInvalidName, name, r, r, i)
}
