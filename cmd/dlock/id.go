package main

import (
	"crypto/rand"
	"encoding/hex"
)

// newID returns 8 random hex digits, to keep the names of one run apart
// from another's on a shared backend.
func newID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
