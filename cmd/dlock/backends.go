package main

// Every backend registers its URL scheme when imported, so that
// --backend accepts them all.
import _ "github.com/dlockgo/dlock/internal/backends"
