package main

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
)

const versionHelp = `Usage: dlock version

Prints dlock's module version (from the build information: a release tag,
a pseudo-version, or "(devel)" for a build from a working tree), the VCS
revision when known, and the Go version it was built with.
`

func cmdVersion(_ context.Context, sio *stdio, args []string) int {
	f := newFlags("version", versionHelp, "  dlock version\n")
	if code, ok := f.parseNone(sio, args); !ok {
		return code
	}
	fmt.Fprintln(sio.out, versionString())
	return exitOK
}

// versionString describes the build: module version, revision, Go version.
func versionString() string {
	version, rev, dirty := "(unknown)", "", false
	if bi, ok := debug.ReadBuildInfo(); ok {
		version = bi.Main.Version
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value[:min(len(s.Value), 12)]
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
	}
	s := "dlock " + version
	if rev != "" {
		if dirty {
			rev += "+dirty"
		}
		s += " (" + rev + ")"
	}
	return s + " " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH
}
