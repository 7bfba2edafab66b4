package pglock

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strconv"

	"github.com/dlockgo/dlock/driver"
)

// MaxPermits is the largest semaphore limit the driver accepts: a
// semaphore has one advisory key per permit, and a try takes the first
// free one of them in one statement.
const MaxPermits = 4096

// Supports reports whether the driver implements lock mode m: it does all
// of them (mutex, readers-writer lock, semaphore and election).
func (d *Driver) Supports(m driver.Mode) bool {
	switch m {
	case driver.Exclusive, driver.Read, driver.Write, driver.Permit, driver.Leader:
		return true
	}
	return false
}

// ModeKey returns the advisory lock key of the lock called name of kind m
// (Read and Write are the same readers-writer lock), for a driver whose
// token table is table; slot is the permit's index (0 to limit-1) for a
// semaphore, and ignored for the other kinds. Exclusive gives Key(table,
// name). The other kinds hash a string of their own, so that the mutex,
// the readers-writer lock, the semaphore and the election called name
// never share a key:
//
//	readers-writer  SHA-256("dlock-rw/" + table + "/" + name)
//	semaphore       SHA-256("dlock-sem/" + table + "/" + slot + "/" + slot's name)
//	election        SHA-256("dlock-leader/" + table + "/" + name)
//
// with the slot in decimal and the key the hash's first 8 bytes read as a
// big-endian two's-complement integer, as for Key. No such string starts
// with "dlock/", the mutex's prefix.
func ModeKey(table string, m driver.Mode, name string, slot int) int64 {
	switch m {
	case driver.Read, driver.Write:
		return hashKey("dlock-rw/", table, "", name)
	case driver.Permit:
		return hashKey("dlock-sem/", table, strconv.Itoa(slot)+"/", name)
	case driver.Leader:
		return hashKey("dlock-leader/", table, "", name)
	}
	return Key(table, name)
}

// hashKey is the first 8 bytes of SHA-256(prefix + table + "/" + mid +
// name), as a bigint.
func hashKey(prefix, table, mid, name string) int64 {
	var buf [len("dlock-leader/") + 2*maxIdent + 1 + len("/") + 8 + 200]byte
	b := append(buf[:0], prefix...)
	b = append(b, table...)
	b = append(b, '/')
	b = append(b, mid...)
	b = append(b, name...)
	sum := sha256.Sum256(b)
	return int64(binary.BigEndian.Uint64(sum[:8]))
}

// rowName is the token table row of the lock called name of kind m: the
// name for the mutex, and for the other kinds the name behind a prefix
// holding "#", which no lock name contains, so that each kind has tokens
// of its own.
func rowName(m driver.Mode, name string) string {
	switch m {
	case driver.Read, driver.Write:
		return "rw#" + name
	case driver.Permit:
		return "sem#" + name
	case driver.Leader:
		return "leader#" + name
	}
	return name
}

// channelName is the LISTEN/NOTIFY channel of the semaphore or election
// called name: "dlock_" and 16 hex digits of a hash, a lower-case
// identifier well within PostgreSQL's 63 bytes whatever the name's
// length.
func channelName(table string, m driver.Mode, name string) string {
	k := hashKey("dlock-chan-"+m.String()+"/", table, "", name)
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(k))
	return "dlock_" + hex.EncodeToString(b[:])
}

// permitKeys returns the keys of the limit slots of semaphore name.
func permitKeys(table, name string, limit int) []int64 {
	ks := make([]int64, limit)
	for i := range ks {
		ks[i] = ModeKey(table, driver.Permit, name, i)
	}
	return ks
}

// checkMode rejects what dlock never sends but a direct caller could.
func checkMode(r driver.Request) error {
	switch r.Mode {
	case driver.Exclusive, driver.Read, driver.Write, driver.Leader:
		return nil
	case driver.Permit:
		if r.Limit < 1 || r.Limit > MaxPermits {
			return fmt.Errorf("pglock: semaphore %q: limit %d, want 1 to %d", r.Name, r.Limit, MaxPermits)
		}
		return nil
	}
	return fmt.Errorf("pglock: %q: %w: mode %v", r.Name, driver.ErrUnsupported, r.Mode)
}
