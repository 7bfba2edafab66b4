package redislock

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock/driver"
)

// The kinds of lock besides the mutex (see the package documentation,
// "Lock kinds"). Each has keys of its own, after the prefix and before the
// hash tag: the mutex "x" is <prefix>{x}, the readers-writer lock "x"
// <prefix>rw:{x}, the semaphore <prefix>sem:{x} and the election
// <prefix>le:{x}.
const (
	rwKind        = "rw:"
	semaphoreKind = "sem:"
	electionKind  = "le:"
)

// Operations of the scripts (acquire.lua's mode is opTry or opWait) and
// tags of the kinds' scripts (see scripts/kinds.lua), boxed once so that
// passing them allocates nothing.
var (
	opTry     any = "try"
	opWait    any = "wait"
	opRefresh any = "refresh"
	opRelease any = "release"

	tagRead   any = "r"
	tagWrite  any = "w"
	tagPermit any = "p"
	tagLeader any = "l"

	noArg any = ""

	// byShard tells the election's script to announce a change by
	// SPUBLISH (see useShards).
	byShard any = "s"

	// releaseTTL stands for the TTL arguments of a release, which uses
	// none.
	releaseTTL = &boxedTTL{ms: any(int64(0)), life: any(int64(0))}
)

// Supports reports whether the driver implements mode m: every mode of
// driver.Mode (the mutex, readers-writer locks, semaphores and elections)
// in LayoutDlock, the mutex only in LayoutRedsync (see UnsupportedReason).
func (d *Driver) Supports(m driver.Mode) bool {
	if d.plain {
		return m == driver.Exclusive
	}
	switch m {
	case driver.Exclusive, driver.Read, driver.Write, driver.Permit, driver.Leader:
		return true
	}
	return false
}

// checkMode rejects a Request whose mode the driver does not know or, in
// LayoutRedsync, has not, or a semaphore without permits.
func (d *Driver) checkMode(r driver.Request) error {
	if d.plain && r.Mode != driver.Exclusive {
		return errPlainKind(r.Mode.String()+" lock", r.Name)
	}
	switch r.Mode {
	case driver.Exclusive, driver.Read, driver.Write, driver.Leader:
		return nil
	case driver.Permit:
		if r.Limit < 1 {
			return fmt.Errorf("redislock: semaphore %q: limit %d, want at least 1", r.Name, r.Limit)
		}
		return nil
	}
	return fmt.Errorf("redislock: %s lock %q: %w", r.Mode, r.Name, driver.ErrUnsupported)
}

// kindBase returns the main key of name in a kind: <prefix><kind>{<name>}.
func (d *Driver) kindBase(kind, name string) string {
	return d.prefix + kind + "{" + name + "}"
}

// keysFor returns the keys the scripts of r's mode take: for the mutex
// those of keys; for the other kinds the main key, the fencing counter,
// the queue, the queue's entries, then the holders' tokens (readers and
// permit holders) and the readers (readers-writer locks). They are cut
// from one string, so building them costs two allocations.
func (d *Driver) keysFor(r driver.Request) []string {
	var suffixes []string
	var kind string
	switch r.Mode {
	case driver.Exclusive:
		var buf [4]string
		return d.keysOn(&buf, r)
	case driver.Read, driver.Write:
		kind, suffixes = rwKind, rwSuffixes
	case driver.Permit:
		kind, suffixes = semaphoreKind, semaphoreSuffixes
	default:
		kind, suffixes = electionKind, electionSuffixes
	}
	// <prefix><kind>{<name>}<suffix>, each key written out in one buffer.
	baseLen := len(d.prefix) + len(kind) + len(r.Name) + 2
	n := 0
	for _, s := range suffixes {
		n += baseLen + len(s)
	}
	var b strings.Builder
	b.Grow(n)
	for _, s := range suffixes {
		b.WriteString(d.prefix)
		b.WriteString(kind)
		b.WriteByte('{')
		b.WriteString(r.Name)
		b.WriteByte('}')
		b.WriteString(s)
	}
	all := b.String()
	keys := make([]string, len(suffixes))
	at := 0
	for i, s := range suffixes {
		keys[i] = all[at : at+baseLen+len(s)]
		at += baseLen + len(s)
	}
	return keys
}

// Key suffixes of the kinds, in the scripts' KEYS order.
var (
	rwSuffixes        = []string{"", ":fence", ":q", ":qe", ":t", ":r"}
	semaphoreSuffixes = []string{"", ":fence", ":q", ":qe", ":t"}
	electionSuffixes  = []string{"", ":fence", ":q", ":qe"}
)

// electionChannel is the channel on which every change of the leader of
// election name is announced.
func (d *Driver) electionChannel(name string) string {
	return d.kindBase(electionKind, name) + ":changed"
}

// kindDo runs op of r's kind script (see scripts/kinds.lua) on keys.
func (d *Driver) kindDo(ctx context.Context, r driver.Request, keys []string, op any, b *boxedTTL) *redis.Cmd {
	return d.kindDoOn(ctx, r, keys, op, b, d.entryChannel)
}

// kindDoOn is kindDo with the channel written into a queue entry.
func (d *Driver) kindDoOn(ctx context.Context, r driver.Request, keys []string, op any, b *boxedTTL, channel any) *redis.Cmd {
	script, args, err := d.kindCall(ctx, r, op, b, channel)
	if err != nil {
		cmd := redis.NewCmd(ctx)
		cmd.SetErr(err)
		return cmd
	}
	return d.run(ctx, script, keys, args...)
}

// kindCall returns the script of r's kind and its arguments for op.
func (d *Driver) kindCall(ctx context.Context, r driver.Request, op any, b *boxedTTL, channel any) (*script, []any, error) {
	var s *script
	tag, arg, changed, publish := tagRead, noArg, noArg, noArg
	switch r.Mode {
	case driver.Read:
		s = rwScript
	case driver.Write:
		s, tag = rwScript, tagWrite
	case driver.Permit:
		s, tag, arg = semaphoreScript, tagPermit, r.Limit
	default:
		s, tag, arg, changed = electionScript, tagLeader, r.Value, d.electionChannel(r.Name)
		shard, err := d.useShards(ctx)
		if err != nil {
			return nil, nil, err
		}
		if shard {
			publish = byShard
		}
	}
	return s, []any{op, r.Owner, b.ms, d.fenceTTL, r.Name, channel, b.life, tag, arg, changed, publish}, nil
}

// acquireCall runs one acquisition attempt of r on keys (from keysFor):
// try (never queue) or wait (queue, or refresh the queue entry, whose
// grant message goes to channel). The reply is acquire.lua's, or the same
// shape from the kinds' scripts, as read by acquireReply.
func (d *Driver) acquireCall(ctx context.Context, r driver.Request, keys []string, b *boxedTTL, wait bool, channel any) (attempt, error) {
	switch {
	case r.Mode != driver.Exclusive:
		op := opTry
		if wait {
			op = opWait
		}
		return acquireReply(d.kindDoOn(ctx, r, keys, op, b, channel))
	case wait:
		return acquireReply(d.run(ctx, acquireScript, keys, r.Owner, b.ms, d.fenceTTL, opWait,
			channel, b.life))
	default:
		return acquireReply(d.run(ctx, acquireScript, keys[:2], r.Owner, b.ms, d.fenceTTL, opTry))
	}
}

// attempt is the outcome of one acquisition script call.
type attempt struct {
	got   bool      // the caller holds the lock, with token
	token uint64    // when got
	pttl  int64     // when !got: the holder's remaining time (PTTL)
	seen  uint64    // when !got: the fencing counter at the call
	sent  time.Time // when the call was sent (set by try)
}

// acquireReply reads the reply of an acquisition: the token (acquire.lua
// when the caller holds the lock), {1, token} (the kinds' scripts), or
// {0, pttl, counter}.
func acquireReply(cmd *redis.Cmd) (attempt, error) {
	v, err := cmd.Result()
	if err != nil {
		return attempt{}, err
	}
	if tok, ok := v.(int64); ok {
		return attempt{got: true, token: uint64(tok)}, nil
	}
	res, err := cmd.Int64Slice()
	if err != nil || len(res) < 2 {
		return attempt{}, fmt.Errorf("unexpected reply %v", v)
	}
	if res[0] == 1 {
		return attempt{got: true, token: uint64(res[1])}, nil
	}
	a := attempt{pttl: res[1]}
	if len(res) > 2 {
		a.seen = uint64(res[2])
	}
	return a, nil
}
