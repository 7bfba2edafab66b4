package mysqllock

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
)

// MaxLockNameLen is the longest user-level lock name MySQL (5.7+) accepts;
// MariaDB's limit is longer, but the driver keeps to this one on both.
const MaxLockNameLen = 64

// lockName maps the lock called name to its server-side name (see Names
// in docs/MYSQL.md for why): each upper-case letter as '^' and its
// lower-case form, or, beyond MaxLockNameLen, prefix, '#' and the name's
// hex SHA-256, cut to MaxLockNameLen.
func lockName(prefix, name string) string {
	n := len(prefix) + len(name)
	for i := 0; i < len(name); i++ {
		if isUpper(name[i]) {
			n++
		}
	}
	if n <= MaxLockNameLen {
		b := make([]byte, 0, n)
		b = append(b, prefix...)
		for i := 0; i < len(name); i++ {
			if c := name[i]; isUpper(c) {
				b = append(b, '^', c+('a'-'A'))
			} else {
				b = append(b, c)
			}
		}
		return string(b)
	}
	sum := sha256.Sum256([]byte(name))
	var h [2 * sha256.Size]byte
	hex.Encode(h[:], sum[:])
	return prefix + "#" + string(h[:MaxLockNameLen-len(prefix)-1])
}

// A lockReq is a request resolved once, at the driver's entry.
type lockReq struct {
	name, owner string
	key         string        // the server-side name (lockName)
	timeout     time.Duration // the wait_timeout of its session (sessionTimeout)
}

// resolve checks r (names go as SQL literals: see literal) and resolves it.
func (d *Driver) resolve(r driver.Request) (lockReq, error) {
	if err := dlock.ValidateName(r.Name); err != nil {
		return lockReq{}, err
	}
	return lockReq{name: r.Name, owner: r.Owner, key: lockName(d.prefix, r.Name), timeout: sessionTimeout(r.TTL)}, nil
}

// maxSessionTimeout is the largest wait_timeout MySQL and MariaDB accept.
const maxSessionTimeout = 31536000 * time.Second

// sessionTimeout is ttl rounded up to seconds, within wait_timeout's bounds.
func sessionTimeout(ttl time.Duration) time.Duration {
	s := (ttl + time.Second - 1).Truncate(time.Second)
	return min(max(s, time.Second), maxSessionTimeout)
}

func isUpper(c byte) bool { return 'A' <= c && c <= 'Z' }

// checkPrefix reports whether p can start server-side lock names: lower
// case (for servers that ignore it), without '^' or '#' (escapes, hashes).
func checkPrefix(p string) error {
	if len(p) > MaxPrefixLen {
		return fmt.Errorf("mysqllock: prefix %q is longer than %d bytes", p, MaxPrefixLen)
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || strings.IndexByte("-_.:@+=/", c) >= 0) {
			return fmt.Errorf("mysqllock: prefix %q: character %q is not allowed (lower-case letters, digits and -_.:@+=/)", p, c)
		}
	}
	return nil
}

// literal quotes s as an SQL string literal. It is only given lock names
// (checked by dlock.ValidateName) and their server-side forms, which need
// no escaping in any sql_mode: statements go as plain text, one round
// trip each, whatever the DSN's interpolateParams.
func literal(s string) string { return "'" + s + "'" }
