package redlock

import (
	_ "embed"

	"github.com/dlockgo/dlock/internal/redispipe"
)

// The Lua scripts, one per request a node receives, so that each is one
// round trip and atomic on its node. They run by EVALSHA and fall back to
// EVAL when the node does not have them cached (after a restart).
var (
	//go:embed scripts/acquire.lua
	acquireLua string
	//go:embed scripts/fence.lua
	fenceLua string
	//go:embed scripts/refresh.lua
	refreshLua string
	//go:embed scripts/release.lua
	releaseLua string

	acquireScript = newScript(acquireLua)
	fenceScript   = newScript(fenceLua)
	refreshScript = newScript(refreshLua)
	releaseScript = newScript(releaseLua)
)

// allScripts lists them, for loading them all into a node at once.
var allScripts = []*script{acquireScript, fenceScript, refreshScript, releaseScript}

type script = redispipe.Script

var newScript = redispipe.NewScript
