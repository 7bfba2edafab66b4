package pglock

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"strings"
)

// Key returns the advisory lock key of the lock called name, for a driver
// whose token table is table: the first 8 bytes, read as a big-endian
// two's-complement integer, of the SHA-256 of "dlock/" + table + "/" + name.
// A table name holds no slash, so the hashed string is unambiguous; the
// table is part of it because locks and their tokens belong together: two
// drivers on different tables never share a lock, so their token sequences
// never mix on one.
//
// The same value in SQL, for operators looking a lock up in pg_locks:
//
//	SELECT ('x' || encode(substr(sha256(convert_to('dlock/' || 'dlock_tokens' || '/' || 'orders/42', 'UTF8')), 1, 8), 'hex'))::bit(64)::bigint
//
// pg_locks shows a bigint key split in two: classid is its high 32 bits
// and objid its low 32 bits (both unsigned), with objsubid 1.
//
// Two names whose keys are equal exclude each other: that is safe for
// mutual exclusion, never unsafe (each keeps its own token row). Among n
// names in use, the chance that any two share a key is about n²/2⁶⁵:
// 3·10⁻⁸ for a million names.
func Key(table, name string) int64 {
	// The hashed string is built on the stack when it fits, as it does for
	// every valid table and lock name.
	var buf [len("dlock/") + 2*maxIdent + 1 + len("/") + 200]byte
	b := append(buf[:0], "dlock/"...)
	b = append(b, table...)
	b = append(b, '/')
	b = append(b, name...)
	sum := sha256.Sum256(b)
	return int64(binary.BigEndian.Uint64(sum[:8]))
}

// migrateKey is the advisory key under which Migrate serializes the
// creation of table, so that concurrent first uses do not race in
// CREATE ... IF NOT EXISTS.
func migrateKey(table string) int64 { return Key(table, "#migrate") }

// Limits of a table name: PostgreSQL identifiers have at most 63 bytes,
// and the sequence's name adds "_seq".
const (
	maxIdent      = 63
	seqSuffix     = "_seq"
	maxTableIdent = maxIdent - len(seqSuffix)
)

// checkTable reports whether t can be a token table's name: an unquoted
// identifier of lower-case ASCII letters, digits and underscores, not
// starting with a digit, optionally qualified by a schema of the same
// form ("locks.dlock_tokens").
func checkTable(t string) error {
	schema, table, qualified := strings.Cut(t, ".")
	if !qualified {
		schema, table = "", t
	} else if err := checkIdent(schema, maxIdent); err != nil {
		return fmt.Errorf("pglock: table %q: schema: %w", t, err)
	}
	if err := checkIdent(table, maxTableIdent); err != nil {
		return fmt.Errorf("pglock: table %q: %w", t, err)
	}
	return nil
}

func checkIdent(s string, max int) error {
	if s == "" {
		return fmt.Errorf("empty identifier")
	}
	if len(s) > max {
		return fmt.Errorf("%d bytes, more than %d", len(s), max)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', c == '_':
		case '0' <= c && c <= '9' && i > 0:
		default:
			return fmt.Errorf("character %q at %d: want lower-case letters, digits and underscores, not starting with a digit", c, i)
		}
	}
	return nil
}
