// Package harness runs dlock's benchmark scenarios against dlock and its
// peers (bsm/redislock, redsync, a raw go-redis loop) on the same Redis
// servers, and dlock's NATS backend against a raw jetstream KV loop on a
// nats-server of its own, for the Go benchmarks and for cmd/compare.
package harness

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock/internal/scale"
)

// TTL is the lock TTL every implementation uses; cmd/scale sets it longer,
// so that the peers, which do not renew, hold their locks through a sweep.
var TTL = 10 * time.Second

// Impl is one locking implementation under test: Acquire takes the lock
// on a key, waiting (with the implementation's own waiting policy) until
// it is held or ctx ends; Close releases the implementation's clients.
// It is a scale.Locker, so that cmd/scale sweeps it as it is.
type Impl = scale.Locker

// Held is an acquired lock.
type Held = scale.Held

// Env is what implementations are built on: the shared Redis server, the
// benchmark's private masters and its private nats-server.
type Env struct {
	// Shared is the address of the machine's Redis (127.0.0.1:6379). It is
	// never flushed; keys there carry the run's unique prefix.
	Shared string
	// Nodes are the addresses of the private redis-servers (5) the
	// benchmark started; they may be flushed between implementations.
	Nodes []string
	// NATS is the URL (nats://127.0.0.1:port) of the benchmark's
	// nats-server (StartNATS), where the NATS implementations make their
	// buckets (Bucket); it is killed, buckets and all, at the end.
	NATS string
	// Run is unique to this run; every key starts with "dlockbench/"+Run.
	Run string
}

// ownerValue returns 128 random bits in hex, the value a lock holder
// writes, as dlock and the peers make theirs.
func ownerValue() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// NewEnv returns an Env with a fresh run id.
func NewEnv(shared string, nodes []string, natsURL string) *Env {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return &Env{Shared: shared, Nodes: nodes, NATS: natsURL, Run: time.Now().UTC().Format("20060102T150405") + "-" + hex.EncodeToString(b[:])}
}

// Key returns a key (and dlock name) unique to this run, implementation,
// scenario and purpose.
func (e *Env) Key(impl, scenario, purpose string) string {
	k := "dlockbench/" + e.Run + "/" + impl + "/" + scenario
	if purpose != "" {
		k += "/" + purpose
	}
	return k
}

// Spec describes an implementation.
type Spec struct {
	Name string
	// Private is true when the implementation uses the private nodes (and
	// so those may be flushed before it runs).
	Private bool
	// NATS is true when the implementation uses the private nats-server
	// (Env.NATS) rather than Redis.
	NATS bool
	// OptIn is true for a diagnostic implementation, run only when named.
	OptIn bool
	New   func(e *Env) (Impl, error)
}

// Implementation names.
const (
	DlockRedis   = "dlock-redis"
	DlockRedlock = "dlock-redlock5"
	Raw          = "raw-goredis"
	BSM          = "bsm-redislock"
	Redsync1     = "redsync-1"
	Redsync5     = "redsync-5"
	// DlockRedisClient is dlock's redis backend given a go-redis client
	// with default options, redislock.New(redis.NewClient(&redis.Options{Addr: …})),
	// as a user who already has a client would build it (a diagnostic, run
	// only when named).
	DlockRedisClient = "dlock-redis-client"
	// DlockRedisAutoPipe is dlock's redis backend over go-redis's
	// Client.AutoPipeline(), the documented way to coalesce calls (a
	// diagnostic, run only when named).
	DlockRedisAutoPipe = "dlock-redis-autopipe"
	// DlockRedisDriver is dlock's redis Driver alone, without a Locker:
	// redislock.NewDriver over a go-redis client with default options,
	// Lock and Unlock with a random owner (a diagnostic, run only when
	// named). Against DlockRedisClient it shows what the Locker and its
	// lease cost; against the peers, what the driver and its scripts do.
	DlockRedisDriver = "dlock-redis-driver"
	// RawHop is the raw loop with each call made from a new goroutine
	// while the caller waits for its result on a channel, as redsync
	// makes its per-node calls (a diagnostic, run only when named): it
	// shows what that hand-off alone does to latency.
	RawHop = "raw-goredis-hop"
	// RawLua is a raw loop that takes the lock in a script as
	// bsm/redislock does (SET NX PX) and releases it with the same Lua
	// delete (a diagnostic, run only when named): the peers' server work
	// without any library's client code.
	RawLua = "raw-goredis-lua"
	// RawFenced is RawLua's loop with dlock's server work on a free lock:
	// the acquire script also increments a fencing counter, the release
	// script also checks that no queue exists (a diagnostic, run only
	// when named). Against RawLua it prices that work alone, with the
	// same client code.
	RawFenced = "raw-goredis-fenced"
	// RawLuaDeadline is RawLua's loop with bsm/redislock's one other
	// client step: an Acquire whose context has no deadline runs under
	// context.WithDeadline(now+TTL) (a diagnostic, run only when named).
	// Against RawLua it shows what that per-call timer alone does to a
	// round trip's latency.
	RawLuaDeadline = "raw-goredis-lua-deadline"
	// DlockNATS is dlock's nats:// backend on the private nats-server.
	DlockNATS = "dlock-nats"
	// RawJetStream is a hand-written loop over nats.go's jetstream KV
	// API, the NATS floor.
	RawJetStream = "raw-jetstream"
)

// specs lists every implementation in the order they are run and shown.
// dlock's are added by dlock.go.
var specs = []Spec{
	{Name: Raw, New: newRaw},
	{Name: RawHop, OptIn: true, New: newRawHop},
	{Name: RawLua, OptIn: true, New: newRawLua},
	{Name: RawFenced, OptIn: true, New: newRawFenced},
	{Name: RawLuaDeadline, OptIn: true, New: newRawLuaDeadline},
	{Name: BSM, New: newBSM},
	{Name: Redsync1, New: newRedsync1},
	{Name: Redsync5, Private: true, New: newRedsync5},
	{Name: RawJetStream, NATS: true, New: newRawJetStream},
}

// NeedNATS reports whether any of specs uses the private nats-server.
func NeedNATS(specs []Spec) bool {
	return slices.ContainsFunc(specs, func(s Spec) bool { return s.NATS })
}

// Specs returns the implementations, dlock's first.
func Specs() []Spec { return specs }

// Names lists every implementation's name, comma-separated.
func Names() string {
	n := make([]string, len(specs))
	for i, s := range specs {
		n[i] = s.Name
	}
	return strings.Join(n, ", ")
}

// Select returns the specs named in the comma-separated list (for "" or
// "all": all but the opt-in ones).
func Select(list string) ([]Spec, error) {
	if list == "" || list == "all" {
		return slices.DeleteFunc(slices.Clone(specs), func(s Spec) bool { return s.OptIn }), nil
	}
	var out []Spec
	for n := range strings.SplitSeq(list, ",") {
		n = strings.TrimSpace(n)
		i := slices.IndexFunc(specs, func(s Spec) bool { return s.Name == n })
		if i < 0 {
			return nil, fmt.Errorf("unknown implementation %q; known: %s", n, Names())
		}
		out = append(out, specs[i])
	}
	return out, nil
}

// NewClient returns a go-redis client with default options, as a new user
// builds one, for the peers and the harness's own calls (flush, cleanup,
// INFO); dlock's backends build the clients their URLs document (dlock.go).
func NewClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr})
}

// FlushNodes empties the private nodes (never the shared server).
func FlushNodes(ctx context.Context, e *Env) error {
	var errs []error
	for _, a := range e.Nodes {
		if a == e.Shared {
			return errors.New("refusing to flush the shared server")
		}
		c := NewClient(a)
		errs = append(errs, c.FlushAll(ctx).Err())
		_ = c.Close()
	}
	return errors.Join(errs...)
}

// Cleanup deletes this run's keys from the shared server, found by SCAN
// over the run id, which every implementation's keys contain.
func Cleanup(ctx context.Context, e *Env) (int, error) {
	c := NewClient(e.Shared)
	defer c.Close()
	n := 0
	iter := c.Scan(ctx, 0, "*"+e.Run+"*", 1000).Iterator()
	var batch []string
	for iter.Next(ctx) {
		batch = append(batch, iter.Val())
		if len(batch) == 500 {
			if err := c.Unlink(ctx, batch...).Err(); err != nil {
				return n, err
			}
			n += len(batch)
			batch = batch[:0]
		}
	}
	if err := iter.Err(); err != nil {
		return n, err
	}
	if len(batch) > 0 {
		if err := c.Unlink(ctx, batch...).Err(); err != nil {
			return n, err
		}
		n += len(batch)
	}
	return n, nil
}
