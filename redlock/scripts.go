package redlock

import (
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
)

// The Lua scripts, one per request a node receives, so that each is one
// round trip and atomic on its node. They run by EVALSHA and fall back to
// EVAL when the node does not have them cached (after a restart or a
// SCRIPT FLUSH), as go-redis's Script.Run does.
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

// allScripts lists them, for Prepare to load them all into a node at once.
var allScripts = []*script{acquireScript, fenceScript, refreshScript, releaseScript}

// script is a Lua script with its source and SHA-1, each boxed once as a
// command argument.
type script struct {
	src, sha any // string
}

func newScript(src string) *script {
	h := sha1.Sum([]byte(src))
	return &script{src: src, sha: hex.EncodeToString(h[:])}
}

// Source returns the script's Lua source.
func (s *script) Source() string { return s.src.(string) }

// Hash returns the script's SHA-1, as EVALSHA takes it.
func (s *script) Hash() string { return s.sha.(string) }
