// Command dlock takes distributed locks from the shell: it runs a command
// while holding a lock (the cron job that must run once across several
// machines), shows who holds what, measures a backend, and demonstrates
// why fencing tokens matter. See docs/CLI.md, or run dlock --help.
package main

import (
	"os"

	_ "github.com/dlockgo/dlock/internal/backends" // every backend's URL scheme, for --backend
)

func main() {
	os.Exit(dlockMain(os.Args[1:], os.Stdout, os.Stderr))
}
