package harness

import (
	"context"
	"flag"
	"fmt"
	"os"
)

// Main runs a command's run and, if it fails, prints the error after the
// command's name and exits 1.
func Main(name string, run func() error) {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, name+":", err)
		os.Exit(1)
	}
}

// Flags declares the flags of the commands that run implementations: the
// shared Redis server (-redis) and the implementations (-impls). After
// flag.Parse, parsed checks that the server is on loopback and returns it
// with the implementations selected.
func Flags() (parsed func() (shared string, specs []Spec, err error)) {
	shared := flag.String("redis", "127.0.0.1:6379", "address of the shared Redis server (loopback only)")
	impls := flag.String("impls", "", "comma-separated implementations (default all but diagnostics): "+Names())
	return func() (string, []Spec, error) {
		if err := Loopback(*shared); err != nil {
			return "", nil, err
		}
		specs, err := Select(*impls)
		return *shared, specs, err
	}
}

// CleanupAndReport runs Cleanup and says on stderr how it went.
func CleanupAndReport(e *Env) {
	if n, err := Cleanup(context.Background(), e); err != nil {
		fmt.Fprintf(os.Stderr, "cleanup of %s: %v\n", e.Shared, err)
	} else {
		fmt.Fprintf(os.Stderr, "deleted %d keys of this run from %s\n", n, e.Shared)
	}
}
