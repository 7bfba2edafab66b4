package redislock

import (
	"context"
	_ "embed"
	"errors"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock/internal/redisutil"
)

// The Lua scripts: one per hot operation of the mutex, one per other kind
// of lock, so that each operation is one round trip (see run).
var (
	//go:embed scripts/lib.lua
	libLua string
	//go:embed scripts/acquire.lua
	acquireLua string
	//go:embed scripts/release.lua
	releaseLua string
	//go:embed scripts/renew.lua
	renewLua string
	//go:embed scripts/kinds.lua
	kindsLua string
	//go:embed scripts/rw.lua
	rwLua string
	//go:embed scripts/semaphore.lua
	semaphoreLua string
	//go:embed scripts/election.lua
	electionLua string
	//go:embed scripts/leader.lua
	leaderLua string
	//go:embed scripts/plain_release.lua
	plainReleaseLua string

	// lib.lua holds the functions that the mutex's acquire and release
	// share, and kinds.lua, after it, those of the other kinds' scripts.
	acquireScript = redisutil.NewScript(withLib(acquireLua))
	releaseScript = redisutil.NewScript(withLib(releaseLua))
	renewScript   = redisutil.NewScript(renewLua)

	// LayoutRedsync takes the lock with acquireScript in try mode and
	// renews it with renewScript; its release is its own.
	plainReleaseScript = redisutil.NewScript(plainReleaseLua)

	kindsLib        = libLua + "\n" + kindsLua + "\n"
	rwScript        = redisutil.NewScript(kindsLib + rwLua)
	semaphoreScript = redisutil.NewScript(kindsLib + semaphoreLua)
	electionScript  = redisutil.NewScript(kindsLib + electionLua)
	leaderScript    = redisutil.NewScript(leaderLua)
)

// withLib puts lib.lua into src where src says --@lib.
func withLib(src string) string {
	const mark = "\n--@lib\n"
	if !strings.Contains(src, mark) {
		panic("redislock: a script lacks its --@lib line")
	}
	return strings.Replace(src, mark, "\n"+libLua+"\n", 1)
}

// run sends one call of s through the driver's client with the caller's
// ctx, as go-redis's Script.Run does: EVALSHA, then EVAL (which caches it
// again) if the server answers NOSCRIPT after a restart or SCRIPT FLUSH
// (see Requests in docs/REDIS.md). The command is built here, not by
// EvalSha, so that its arguments go in one slice once, each key as a
// pointer (which go-redis writes and routes by as the string): boxing a
// string costs an allocation, a pointer none.
func (d *Driver) run(ctx context.Context, s *redisutil.Script, keys []string, args ...any) *redis.Cmd {
	cmdArgs := make([]any, 3+len(keys)+len(args))
	cmdArgs[0], cmdArgs[1], cmdArgs[2] = "evalsha", s.SHA, len(keys)
	for i := range keys {
		cmdArgs[3+i] = &keys[i]
	}
	copy(cmdArgs[3+len(keys):], args)
	var r retrier
	for {
		cmd := d.process(ctx, cmdArgs)
		if !r.again(ctx, cmd.Err(), true) {
			return cmd
		}
		if r.byEval {
			cmdArgs[0], cmdArgs[1] = "eval", s.Src
		}
	}
}

// retrier decides whether a script call that failed is sent again: by
// EVAL (byEval) once the server answers NOSCRIPT, or, where slots move,
// after a pause while a Cluster's slot moves (TRYAGAIN: the keys are
// split between two primaries; MOVED, ASK: redirected more often than
// go-redis follows; CLUSTERDOWN: failing over). The script did not run:
// the move is waited out (go-redis's own retries give up within a
// second), at most for tryAgainFor in all.
type retrier struct {
	byEval bool
	until  time.Time
}

// again reports whether to send the call that failed with err again.
func (r *retrier) again(ctx context.Context, err error, slotsMove bool) bool {
	switch {
	case err == nil:
		return false
	case !r.byEval && isNoScript(err):
		r.byEval = true
		return true
	case slotsMove && movingSlot(err):
		if r.until.IsZero() {
			r.until = time.Now().Add(tryAgainFor)
		}
		return time.Now().Before(r.until) && sleep(ctx, tryAgainPause)
	}
	return false
}

// isNoScript reports whether err is the server's NOSCRIPT: it lacks the
// script (a restart, SCRIPT FLUSH), which EVAL then loads again.
func isNoScript(err error) bool {
	return err != nil && (errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT"))
}

// movingSlot reports whether err is a Cluster's refusal to run a command
// while a slot moves: TRYAGAIN, MOVED, ASK or CLUSTERDOWN.
func movingSlot(err error) bool {
	return redis.IsTryAgainError(err) || redis.HasErrorPrefix(err, "MOVED") ||
		redis.HasErrorPrefix(err, "ASK") || redis.HasErrorPrefix(err, "CLUSTERDOWN")
}

// tryAgainFor bounds how long a script call waits out TRYAGAIN replies,
// and tryAgainPause is the pause between its attempts.
const (
	tryAgainFor   = 10 * time.Second
	tryAgainPause = 20 * time.Millisecond
)

// process sends the EVAL or EVALSHA command of args, whose keys start at
// args[3] (which routes it on a Redis Cluster).
func (d *Driver) process(ctx context.Context, args []any) *redis.Cmd {
	cmd := redis.NewCmd(ctx, args...)
	cmd.SetFirstKeyPos(3)
	_ = d.client.Process(ctx, cmd)
	return cmd
}
