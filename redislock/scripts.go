package redislock

import (
	_ "embed"
	"strings"

	"github.com/dlockgo/dlock/internal/redispipe"
)

// The Lua scripts: one per hot operation of the mutex, one per other kind
// of lock, so that each operation is one round trip.
// They run by EVALSHA and fall back to EVAL when the server does not have
// them cached (after a restart or SCRIPT FLUSH).
var (
	//go:embed scripts/lib.lua
	libLua string
	//go:embed scripts/acquire.lua
	acquireLua string
	//go:embed scripts/release.lua
	releaseLua string
	//go:embed scripts/refresh.lua
	refreshLua string
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

	acquireScript = redispipe.NewScript(withLib(acquireLua))
	releaseScript = redispipe.NewScript(withLib(releaseLua))
	refreshScript = redispipe.NewScript(refreshLua)

	// The other kinds of lock: one script per kind, each operation of
	// which (try, wait, refresh, release) is one call.
	rwScript        = redispipe.NewScript(withKindsLib(rwLua))
	semaphoreScript = redispipe.NewScript(withKindsLib(semaphoreLua))
	electionScript  = redispipe.NewScript(withKindsLib(electionLua))
	leaderScript    = redispipe.NewScript(leaderLua)

	allScripts = []*redispipe.Script{acquireScript, releaseScript, refreshScript,
		rwScript, semaphoreScript, electionScript, leaderScript}
)

// withLib returns script with lib.lua in place of its "-- @lib" line.
// What comes before that line runs without the shared functions, which
// Lua would otherwise create (a closure each) on every call.
func withLib(script string) string {
	return splice(script, libLua)
}

// withKindsLib returns the script of a kind of lock with lib.lua and
// kinds.lua in place of its "-- @lib" line, after its fast paths.
func withKindsLib(script string) string {
	return splice(script, libLua+"\n"+kindsLua)
}

// splice returns script with lib in place of its "-- @lib" line.
func splice(script, lib string) string {
	const mark = "\n-- @lib\n"
	if !strings.Contains(script, mark) {
		panic("redislock: script without a -- @lib line")
	}
	return strings.Replace(script, mark, "\n"+lib+"\n", 1)
}
