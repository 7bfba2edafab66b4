package pglock

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"

	"github.com/dlockgo/dlock/driver"
)

// MaxPermits is the largest semaphore limit the driver accepts: a
// semaphore has one advisory key per permit, and a try takes the first
// free one of them in one statement.
const MaxPermits = 4096

// Supports reports whether the driver implements lock mode m: it does all
// of them (mutex, readers-writer lock, semaphore and election).
func (d *Driver) Supports(m driver.Mode) bool { return m <= driver.Leader }

// Key returns the advisory lock key of the lock called name, for a driver
// whose token table is table: the first 8 bytes, read as a big-endian
// two's-complement integer, of the SHA-256 of "dlock/" + table + "/" + name
// (a table name holds no slash, so the hashed string is unambiguous). Two
// names whose keys are equal exclude each other (safe, never unsafe). See
// docs/POSTGRES.md, Keys, for the same value in SQL, how pg_locks shows it,
// and the collision odds.
func Key(table, name string) int64 {
	return hashKey("dlock/", table, "", name)
}

// migrateKey is the key under which Migrate serializes table's creation.
func migrateKey(table string) int64 { return Key(table, "#migrate") }

// ModeKey returns the advisory lock key of the lock called name of kind m
// (Read and Write are one readers-writer lock) on token table table; slot
// is a semaphore's permit index (0 to limit-1), ignored otherwise.
// Exclusive gives Key(table, name); the other kinds hash strings of their
// own, so that no two kinds share a key (see docs/POSTGRES.md, section 7).
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
// name), as a bigint, hashed on the stack for every valid table and name.
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

// rowName is the token row of name's lock of kind m: the name for the
// mutex, else behind a prefix with "#" (in no name): tokens of its own.
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
// called name (kind "permit" or "leader"): "dlock_" and 16 hex digits of
// a hash, an identifier within 63 bytes whatever the name's length.
func channelName(table, kind, name string) string {
	k := hashKey("dlock-chan-"+kind+"/", table, "", name)
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

// A lockReq is a request resolved once, at the driver's entry.
type lockReq struct {
	name, owner string
	mode        driver.Mode
	value       string        // an election's candidate
	ttl         time.Duration // for a semaphore's waiter: see lockPermit
	period      time.Duration // the keep-alive period of its session
	key         int64         // the advisory key (a semaphore's: see slots)
	slots       []int64       // a semaphore's keys, one per permit
	row         string        // the token table row
	channel     string        // a semaphore's or an election's channel
	word        string        // its kind in errors: see modeWord
}

// resolve checks r and resolves it.
func (d *Driver) resolve(r driver.Request) (lockReq, error) {
	if err := checkMode(r); err != nil {
		return lockReq{}, err
	}
	t := d.st.table
	q := lockReq{name: r.Name, owner: r.Owner, mode: r.Mode, value: r.Value, ttl: r.TTL,
		period: d.keepalive, row: rowName(r.Mode, r.Name), word: modeWord(r.Mode)}
	if r.TTL > 0 { // a third of the TTL, if that is shorter
		q.period = max(MinKeepalive, min(d.keepalive, r.TTL/3))
	}
	switch r.Mode {
	case driver.Permit:
		q.slots = permitKeys(t, r.Name, r.Limit)
		q.channel = channelName(t, q.word, r.Name)
	case driver.Leader:
		q.key = ModeKey(t, r.Mode, r.Name, 0)
		q.channel = channelName(t, q.word, r.Name)
	default:
		q.key = ModeKey(t, r.Mode, r.Name, 0)
	}
	return q, nil
}

// modeWord names a mode in errors and channels: Mode.String's, or "mutex".
func modeWord(m driver.Mode) string {
	if m == driver.Exclusive {
		return "mutex"
	}
	return m.String()
}

// checkMode rejects what dlock never sends but a direct caller could.
func checkMode(r driver.Request) error {
	switch {
	case r.Mode > driver.Leader:
		return fmt.Errorf("pglock: %q: %w: mode %v", r.Name, driver.ErrUnsupported, r.Mode)
	case r.Mode == driver.Permit && (r.Limit < 1 || r.Limit > MaxPermits):
		return fmt.Errorf("pglock: semaphore %q: limit %d, want 1 to %d", r.Name, r.Limit, MaxPermits)
	}
	return nil
}
