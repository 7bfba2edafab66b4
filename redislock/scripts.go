package redislock

import (
	_ "embed"

	"github.com/dlockgo/dlock/internal/redispipe"
)

// The Lua scripts, one per hot operation, so that each is one round trip.
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

	acquireScript = redispipe.NewScript(libLua + acquireLua)
	releaseScript = redispipe.NewScript(libLua + releaseLua)
	refreshScript = redispipe.NewScript(refreshLua)

	allScripts = []*redispipe.Script{acquireScript, releaseScript, refreshScript}
)

// Script modes of acquire.lua, boxed once so that passing them allocates
// nothing.
var (
	modeTry  any = "try"
	modeWait any = "wait"
)
