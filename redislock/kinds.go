package redislock

import (
	"strings"

	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/internal/redisutil"
)

// A kind is one kind of lock as a layout lays it out in Redis: its keys,
// and the scripts of its operations (see Keys, Lock kinds and Layouts in
// docs/REDIS.md). Every key of a lock of layout=dlock is
// <prefix><head>{<name>}<suffix>, so that all share the hash tag {name}.
type kind struct {
	head     string   // after the prefix, before the hash tag
	suffixes []string // after the hash tag, in the scripts' KEYS order
	// script runs each operation of the kinds other than the mutex (see
	// scripts/kinds.lua), whose scripts are their own; tag is its side.
	script *redisutil.Script
	tag    any
	// plain is redsync's mutex (LayoutRedsync): the plain key
	// <prefix><name> and dlock's counter beside it, no queue (see
	// lockPlain), a release of its own.
	plain bool
}

// The kinds of lock. The mutex "x" is <prefix>{x}, the readers-writer
// lock "x" <prefix>rw:{x}, the semaphore <prefix>sem:{x} and the election
// <prefix>le:{x}; with each, its fencing counter, queue and queue entries.
var (
	mutexKind   = &kind{suffixes: []string{"", ":fence", ":q", ":qe"}}
	readKind    = &kind{head: "rw:", suffixes: rwSuffixes, script: rwScript, tag: "r"}
	writeKind   = &kind{head: "rw:", suffixes: rwSuffixes, script: rwScript, tag: "w"}
	permitKind  = &kind{head: "sem:", suffixes: []string{"", ":fence", ":q", ":qe", ":t"}, script: semaphoreScript, tag: "p"}
	leaderKind  = &kind{head: "le:", suffixes: []string{"", ":fence", ":q", ":qe"}, script: electionScript, tag: "l"}
	plainMutex  = &kind{plain: true}
	rwSuffixes  = []string{"", ":fence", ":q", ":qe", ":t", ":r"}
	dlockKinds  = map[driver.Mode]*kind{driver.Exclusive: mutexKind, driver.Read: readKind, driver.Write: writeKind, driver.Permit: permitKind, driver.Leader: leaderKind}
	plainKinds  = map[driver.Mode]*kind{driver.Exclusive: plainMutex}
	dlockListed = []*kind{mutexKind, writeKind, permitKind, leaderKind} // by Inspect
)

// Operations of the scripts (the kinds' scripts take one as ARGV[1]; the
// mutex's acquire.lua is in wait mode when given a channel),
// boxed once so that passing them allocates nothing.
var (
	opTry     any = "try"
	opWait    any = "wait"
	opRenew   any = "renew"
	opRelease any = "release"

	noArg   any = ""
	byShard any = "s" // tells a script to announce a change by SPUBLISH (see useShards)

	// releaseTTL stands for the TTL arguments of a release, which uses none.
	releaseTTL = &boxedTTL{ms: any(int64(0)), life: any(int64(0))}
)

// The keys and channels dlock adds beside LayoutRedsync's plain keys start
// so, whatever the prefix: the peers' keys are <prefix><name>, often with
// an empty prefix, so dlock's own keep to a namespace no LayoutDlock key
// ("<prefix>{" or "<prefix><kind>{") reaches. scripts/plain_release.lua
// spells the channel's form out too.
const (
	plainFenceHead   = DefaultPrefix + "fence:{"
	plainChannelHead = DefaultPrefix + "released:{"
)

// keys returns the keys of lock name of kind k, in the scripts' KEYS
// order, cut from one string (two allocations: the string and the slice);
// a key that starts the next (<base> and <base>:fence, <base>:q and
// <base>:qe) is cut from it. In LayoutRedsync they are <prefix><name> and
// dlock:fence:{<prefix><name>}, whose hash tag is the whole lock key (which
// holds no brace), so on a Redis Cluster the two share a slot.
func (k *kind) keys(prefix, name string) []string {
	if k.plain {
		s := plainFenceHead + prefix + name + "}"
		return []string{s[len(plainFenceHead) : len(s)-1], s}
	}
	starts := func(i int) bool { // key i starts key i+1
		return i+1 < len(k.suffixes) && strings.HasPrefix(k.suffixes[i+1], k.suffixes[i])
	}
	baseLen, n := len(prefix)+len(k.head)+len(name)+2, 0
	for i, s := range k.suffixes {
		if !starts(i) {
			n += baseLen + len(s)
		}
	}
	var b strings.Builder
	b.Grow(n)
	for i, s := range k.suffixes {
		if !starts(i) {
			b.WriteString(prefix)
			b.WriteString(k.head)
			b.WriteByte('{')
			b.WriteString(name)
			b.WriteByte('}')
			b.WriteString(s)
		}
	}
	all, at := b.String(), 0
	keys := make([]string, len(k.suffixes))
	for i, s := range k.suffixes {
		keys[i] = all[at : at+baseLen+len(s)]
		if !starts(i) {
			at += baseLen + len(s)
		}
	}
	return keys
}

// scanHead is what the key Inspect scans for starts with, before the
// name: the main key's head in LayoutDlock, the counter's in
// LayoutRedsync (the peers' keys are plain strings, which nothing tells
// from an application's other keys).
func (k *kind) scanHead(prefix string) string {
	if k.plain {
		return plainFenceHead + prefix
	}
	return prefix + k.head + "{"
}

// base returns the main key of lock name of kind k.
func (d *Driver) base(k *kind, name string) string {
	return d.prefix + k.head + "{" + name + "}"
}

// electionChannel is the channel on which every change of the leader of
// election name is announced.
func (d *Driver) electionChannel(name string) string {
	return d.base(leaderKind, name) + ":changed"
}

// plainChannel is the channel on which a dlock release of the mutex name
// in LayoutRedsync wakes dlock's waiters for it: its hash tag is the lock
// key, so on a Redis 7 Cluster it is a shard channel of the lock's slot.
func (d *Driver) plainChannel(name string) string {
	return plainChannelHead + d.prefix + name + "}"
}

// shardChannel is the shard channel of the grants of lock name: its hash
// tag is the lock's.
func (d *Driver) shardChannel(name string) string { return d.prefix + "{" + name + "}:g" }
