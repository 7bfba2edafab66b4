package driver

import (
	"context"
	"time"
)

// Diagnoser is implemented by drivers that can check their store's
// settings against what dlock's guarantees assume (an evicting Redis, a
// read-only replica, a standby), for tools such as `dlock doctor`;
// callers report its absence as ErrUnsupported.
type Diagnoser interface {
	// Diagnose reads the store's settings and returns one finding per
	// check, for locks of time to live ttl. It only reads: it writes
	// nothing but, where a check needs one, a key or row of its own under
	// the driver's prefix, which it removes. The error is for a store it
	// could not ask at all (unreachable); a setting it cannot read is a
	// finding (a warning that says so).
	Diagnose(ctx context.Context, ttl time.Duration) ([]Finding, error)
}

// Severity is how much a finding matters for dlock's guarantees.
type Severity int

const (
	// OK: the setting is what the guarantees assume.
	OK Severity = iota
	// Warn: the guarantees hold in fewer cases than they could (a restart
	// or failover can lose a lock), or the setting could not be read.
	Warn
	// Fail: a lock can be granted to two holders, or not at all, in
	// normal operation (keys evicted under memory pressure, a replica
	// that refuses writes).
	Fail
)

// String returns "ok", "warn" or "fail".
func (s Severity) String() string {
	switch s {
	case OK:
		return "ok"
	case Warn:
		return "warn"
	case Fail:
		return "fail"
	}
	return "unknown"
}

// Finding is the result of one check of Diagnose.
type Finding struct {
	// Check names the check, short and stable ("maxmemory-policy").
	Check string
	// Severity is ok, warn or fail.
	Severity Severity
	// Found is what the check read ("allkeys-lru, maxmemory 100mb").
	Found string
	// Why says what the finding means for a lock; for OK findings it may
	// be empty.
	Why string
	// Fix is the setting to change; empty for OK findings.
	Fix string
	// Doc is the docs section that explains the setting
	// ("docs/REDIS.md#eviction").
	Doc string
}
