//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package privdir

import "os"

// Check does nothing where the platform has no Unix ownership and modes.
func Check(string, os.FileMode) error { return nil }
