package redislock

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/dlockgo/dlock/driver"
)

// Layout is how a Driver lays a lock out in Redis (see Layouts in the
// package documentation). The zero Layout is LayoutDlock.
type Layout string

const (
	// LayoutDlock is dlock's own layout: every kind of lock, keys tagged
	// {name}, a wait queue with handoff. The default.
	LayoutDlock Layout = "dlock"

	// LayoutRedsync is the plain string key of redsync and bsm/redislock:
	// <prefix><name> holding the acquisition's owner value with a PX TTL,
	// beside which dlock keeps a fencing counter of its own. A Driver in
	// this layout shares locks with those libraries' clients on the same
	// names. It has the mutex only, and no wait queue: waiters try again
	// when a dlock release announces itself, when the holder's TTL runs
	// out and every PollInterval.
	LayoutRedsync Layout = "redsync"
)

// DefaultPollInterval is the default of Options.PollInterval: about how
// often, on average, a waiter in LayoutRedsync tries again while the lock
// is held. Releases by redsync or bsm/redislock clients announce nothing,
// so this bounds how long such a release goes unnoticed by dlock's
// waiters. redsync's own waiters try again every 50 to 250 ms (150 ms on
// average); at 100 ms dlock's see a peer's release about as soon as
// redsync's do, for ten small scripts a second per waiting call.
const DefaultPollInterval = 100 * time.Millisecond

// plainSide starts the keys and channels dlock adds beside the plain keys
// of LayoutRedsync, whatever the prefix: the peers' keys are <prefix><name>,
// often with an empty prefix, so dlock's own keys keep to a namespace of
// their own, which no name of LayoutDlock's (always "<prefix>{" or
// "<prefix><kind>{") reaches. scripts/plain_release.lua spells the
// channel's form out too.
const (
	plainFenceHead   = DefaultPrefix + "fence:{"
	plainChannelHead = DefaultPrefix + "released:{"
)

// reasonRedsync is why a Driver in LayoutRedsync lacks every kind of lock
// but the mutex.
const reasonRedsync = "layout=redsync has the mutex only: redsync and bsm/redislock have no readers-writer, semaphore or election format"

// plainKeys returns the keys of the mutex name in LayoutRedsync: the lock,
// <prefix><name>, and its fencing counter, dlock:fence:{<prefix><name>}.
// The counter's hash tag is the whole lock key, so on a Redis Cluster the
// two share a slot (a key without braces hashes whole, and neither a
// prefix nor a name holds a brace). They are cut from one string, so
// building them costs one allocation.
func (d *Driver) plainKeys(name string) (lock, fence string) {
	s := plainFenceHead + d.prefix + name + "}"
	return s[len(plainFenceHead) : len(s)-1], s
}

// plainChannel is the channel on which a dlock release of the mutex name
// in LayoutRedsync wakes dlock's waiters for it: its hash tag is the lock
// key, so on a Redis 7 Cluster it is a shard channel of the lock's slot.
func (d *Driver) plainChannel(name string) string {
	return plainChannelHead + d.prefix + name + "}"
}

// UnsupportedReason says why the driver lacks mode m: "" for the modes it
// has (every one in LayoutDlock), the layout's reason for the others in
// LayoutRedsync. dlock adds it to the error of a request for such a mode.
func (d *Driver) UnsupportedReason(m driver.Mode) string {
	if d.plain && m != driver.Exclusive {
		return reasonRedsync
	}
	return ""
}

var _ driver.Unsupporter = (*Driver)(nil)

// errPlainKind is the error of a request for a kind of lock other than
// the mutex in LayoutRedsync.
func errPlainKind(what, name string) error {
	return fmt.Errorf("redislock: %s %q: %w (%s)", what, name, driver.ErrUnsupported, reasonRedsync)
}

// releasePlain is release in LayoutRedsync: an owner-checked DEL of the
// plain key, announced on the lock's channel (plainChannel) for dlock's
// waiters. A peer's lock, holding another value, is left alone.
func (d *Driver) releasePlain(ctx context.Context, r driver.Request) (bool, error) {
	lock, _ := d.plainKeys(r.Name)
	// Whether the Drivers on this server listen by SSUBSCRIBE; when that
	// could not be told, PUBLISH, which a waiter that listens by
	// SSUBSCRIBE misses: it tries again on its timer then.
	publish := noArg
	if shard, _ := d.useShards(ctx); shard {
		publish = byShard
	}
	n, err := d.run(ctx, plainReleaseScript, []string{lock}, r.Owner, publish).Int64()
	if err != nil {
		return false, fmt.Errorf("redislock: unlock %q: %w", r.Name, err)
	}
	return n == 1, nil
}

// pollDelay is the wait before a waiter in LayoutRedsync tries again when
// nothing else wakes it: PollInterval on average, spread over half to one
// and a half times it, so that waiters that started together do not try
// in step.
func (d *Driver) pollDelay() time.Duration {
	return d.pollInterval/2 + rand.N(d.pollInterval)
}
