package redisutil

import (
	"crypto/sha1"
	"encoding/hex"
)

// Script is a Lua script with its source and SHA-1, each boxed once as a
// command argument, since boxing a string costs an allocation: the
// backends send EVALSHA, and EVAL when the server answers NOSCRIPT.
type Script struct {
	Src, SHA any // strings
}

// NewScript returns the Script of the Lua source src.
func NewScript(src string) *Script {
	h := sha1.Sum([]byte(src))
	return &Script{Src: src, SHA: hex.EncodeToString(h[:])}
}

// Source returns the script's Lua source.
func (s *Script) Source() string { return s.Src.(string) }

// Hash returns the script's SHA-1, as EVALSHA takes it.
func (s *Script) Hash() string { return s.SHA.(string) }
