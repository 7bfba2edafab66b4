package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/redislock"
)

// Exit codes. The busy and lost codes of dlock run are configurable; these
// are their defaults. The values follow sysexits.h where one fits.
const (
	exitOK          = 0
	exitFailure     = 1   // any other error
	exitUsage       = 64  // EX_USAGE: bad flags or arguments, bad backend URL
	exitUnavailable = 69  // EX_UNAVAILABLE: the backend could not be reached or failed
	exitBusy        = 75  // EX_TEMPFAIL: the lock is held by another owner
	exitLost        = 76  // the lock was lost while the command ran
	exitCannotExec  = 126 // the command exists but could not be run (as shells do)
	exitNotFound    = 127 // the command was not found (as shells do)
)

// envBackend names the environment variable that sets the default backend.
const envBackend = "DLOCK_BACKEND"

// defaultBackend is the backend when neither --backend nor DLOCK_BACKEND
// is given: lock files in the per-user state directory.
const defaultBackend = "file://"

// A command is one subcommand of dlock.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, io *stdio, args []string) int
}

// stdio is where a command writes.
type stdio struct {
	out, err io.Writer
}

func commands() []command {
	return []command{
		{"run", "run a command while holding a lock", cmdRun},
		{"acquire", "take a lock that outlives the command, and print its handle", cmdAcquire},
		{"renew", "renew the lock a handle holds", cmdRenew},
		{"release", "release the lock a handle holds", cmdRelease},
		{"status", "show who holds which locks", cmdStatus},
		{"doctor", "check a store's settings against dlock's guarantees", cmdDoctor},
		{"bench", "measure a backend: latency, throughput, contended handoff", cmdBench},
		{"demo", "show overselling without a lock, with one, and with a fencing guard", cmdDemo},
		{"version", "print dlock's version", cmdVersion},
	}
}

const mainHelp = `dlock takes distributed locks from the shell.

Usage:
  dlock <command> [flags] [arguments]

Commands:
%s
The backend is --backend URL, else $DLOCK_BACKEND, else lock files in the
per-user state directory ($XDG_STATE_HOME/dlock or ~/.local/state/dlock),
which needs no server. Backends: %s.

Examples:
  dlock demo
  dlock run --no-wait nightly-report -- ./report.sh
  DLOCK_BACKEND=redis://127.0.0.1:6379 dlock run --ttl 10s backup -- ./backup.sh
  dlock status
  dlock bench --backend redis://127.0.0.1:6379 --backend zk://127.0.0.1:2181

Run 'dlock <command> --help' for a command's flags and examples.
`

// dlockMain runs dlock with args (no program name); it returns the exit code.
func dlockMain(args []string, stdout, stderr io.Writer) int {
	sio := &stdio{out: stdout, err: stderr}
	if len(args) == 0 {
		printMainHelp(stderr)
		return exitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		if len(args) > 1 && args[0] == "help" {
			return dlockMain([]string{args[1], "--help"}, stdout, stderr)
		}
		printMainHelp(stdout)
		return exitOK
	case "-version", "--version":
		return cmdVersion(context.Background(), sio, nil)
	}
	if args[0] == holdCommand { // the detached holder dlock acquire starts
		return cmdHold(context.Background(), sio, args[1:])
	}
	for _, c := range commands() {
		if c.name == args[0] {
			return c.run(context.Background(), sio, args[1:])
		}
	}
	if strings.HasPrefix(args[0], "-") {
		return usageErr(sio, "dlock", "flags go after the command: dlock <command> [flags]; got %q", args[0])
	}
	return usageErr(sio, "dlock", "unknown command %q", args[0])
}

func printMainHelp(w io.Writer) {
	var b strings.Builder
	for _, c := range commands() {
		fmt.Fprintf(&b, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, mainHelp, b.String(), strings.Join(dlock.Schemes(), ", "))
}

// usageErr prints one line about a usage error and returns exitUsage.
func usageErr(sio *stdio, cmd, format string, a ...any) int {
	fmt.Fprintf(sio.err, "%s: %s (see '%s --help')\n", cmd, fmt.Sprintf(format, a...), cmd)
	return exitUsage
}

// failf prints one line about an error and returns code.
func failf(sio *stdio, code int, cmd, format string, a ...any) int {
	fmt.Fprintf(sio.err, "%s: %s\n", cmd, fmt.Sprintf(format, a...))
	return code
}

// flags is a subcommand's flag set with the flags every command shares.
type flags struct {
	*flag.FlagSet
	cmd      string
	help     string // the text before the flags
	examples string
	backends multiFlag
	logLevel string
	logJSON  bool
}

// multiFlag is a string flag that may be repeated.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

func newFlags(name, help, examples string) *flags {
	f := &flags{FlagSet: flag.NewFlagSet("dlock "+name, flag.ContinueOnError), cmd: "dlock " + name, help: help, examples: examples}
	f.SetOutput(io.Discard) // errors are reported in one line by parse
	f.Var(&f.backends, "backend", "backend `URL` (default $"+envBackend+", else "+defaultBackend+": lock files in the per-user state directory)")
	f.StringVar(&f.logLevel, "log-level", "off", "structured log `level` on stderr: debug, info, warn, error or off (dlock's own one-line messages are always printed)")
	f.BoolVar(&f.logJSON, "log-json", false, "log as JSON lines instead of text")
	return f
}

// parse parses args, allowing flags before and between positional
// arguments. It returns the positional arguments, or an exit code when
// parsing ended the command (help asked for, or a usage error).
func (f *flags) parse(sio *stdio, args []string) ([]string, int, bool) {
	var pos []string
	for {
		if code, ok := f.parseOnce(sio, args); !ok {
			return nil, code, false
		}
		args = f.Args()
		if len(args) == 0 {
			return pos, 0, true
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// parseNone is parse for a command that takes flags only: a positional
// argument is a usage error.
func (f *flags) parseNone(sio *stdio, args []string) (int, bool) {
	pos, code, ok := f.parse(sio, args)
	if ok && len(pos) > 0 {
		return usageErr(sio, f.cmd, "no arguments expected, got %q", pos), false
	}
	return code, ok
}

// parseOnce parses the flags before the first positional argument, which
// f.Args then returns with everything after it. ok is false when parsing
// ended the command, with the exit code.
func (f *flags) parseOnce(sio *stdio, args []string) (int, bool) {
	if err := f.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			f.printHelp(sio.out)
			return exitOK, false
		}
		return usageErr(sio, f.cmd, "%v", err), false
	}
	return 0, true
}

func (f *flags) printHelp(w io.Writer) {
	var b bytes.Buffer
	f.SetOutput(&b)
	f.PrintDefaults()
	f.SetOutput(io.Discard)
	// Flags as the docs write them: --flag (the flag package takes both).
	defaults := strings.ReplaceAll("\n"+b.String(), "\n  -", "\n  --")[1:]
	fmt.Fprintf(w, "%s\nFlags:\n%s", f.help, defaults)
	if f.examples != "" {
		fmt.Fprintf(w, "\nExamples:\n%s", f.examples)
	}
}

// backendNamed reports whether the user named a backend (--backend or
// $DLOCK_BACKEND), rather than leaving the default.
func (f *flags) backendNamed() bool {
	return len(f.backends) > 0 || os.Getenv(envBackend) != ""
}

// backend returns the one backend URL the command uses.
func (f *flags) backend() string {
	if len(f.backends) > 0 {
		return f.backends[len(f.backends)-1]
	}
	if v := os.Getenv(envBackend); v != "" {
		return v
	}
	return defaultBackend
}

// logger returns the logger the flags ask for, on w, or a usage error.
func (f *flags) logger(w io.Writer) (*slog.Logger, error) {
	var lvl slog.Level
	if f.logLevel == "off" {
		lvl = logOff
	} else if err := lvl.UnmarshalText([]byte(f.logLevel)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn, error or off", f.logLevel)
	}
	o := &slog.HandlerOptions{Level: lvl}
	var l *slog.Logger
	if f.logJSON {
		l = slog.New(slog.NewJSONHandler(w, o))
	} else {
		l = slog.New(slog.NewTextHandler(w, o))
	}
	// go-redis logs past dlock.WithLogger, through a process-wide logger,
	// a line per failed dial while a server is down (docs/REDLOCK.md);
	// dlock reports each failure that matters once, so those lines are
	// Debug, not flooding a --log-level warn run during an outage.
	redis.SetLogger(redislock.SlogLogger(l, slog.LevelDebug))
	// The backends' messages that are not about a lease (the Redis
	// drivers' eviction warning at open) go to slog.Default, out of
	// WithLogger's reach: make it l, so that --log-level decides them too.
	slog.SetDefault(l)
	return l, nil
}

// logOff is a level above every message's.
const logOff = slog.Level(100)

// redact returns rawURL with its secrets hidden, for messages.
func redact(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return rawURL
	}
	if r := driver.Redact(u); r != u.String() {
		return r
	}
	return rawURL // nothing hidden: as the user wrote it
}

// openLocker opens the backend rawURL. On failure it prints one line and
// returns the exit code: exitUsage for a URL that is wrong in itself,
// exitUnavailable for a backend that could not be reached.
func openLocker(ctx context.Context, sio *stdio, cmd, rawURL string, opts ...dlock.Option) (*dlock.Locker, int) {
	u, err := url.Parse(rawURL)
	switch {
	case err != nil && strings.Contains(rawURL, "@"):
		// The text may hold a password, and so may the parser's error
		// (which quotes the bad escape): show neither.
		return nil, failf(sio, exitUsage, cmd, "bad backend URL: it does not parse (not shown: it may hold a password); "+
			"a %% or @ in a password must be written %%25 or %%40")
	case err != nil:
		return nil, failf(sio, exitUsage, cmd, "bad backend URL %q: %v", rawURL, errors.Unwrap(err))
	case u.Scheme == "":
		return nil, failf(sio, exitUsage, cmd, "bad backend URL %q: no scheme; want one of %s", redact(rawURL), strings.Join(dlock.Schemes(), ", "))
	case !slices.Contains(dlock.Schemes(), u.Scheme):
		return nil, failf(sio, exitUsage, cmd, "bad backend URL %q: unknown scheme %q; want one of %s", redact(rawURL), u.Scheme, strings.Join(dlock.Schemes(), ", "))
	}
	l, err := dlock.Open(ctx, rawURL, opts...)
	if err != nil {
		code := exitUnavailable
		if _, ok := errors.AsType[*dlock.ParamError](err); ok {
			code = exitUsage
		}
		return nil, failf(sio, code, cmd, "backend %s: %v", redact(rawURL), oneLine(err))
	}
	return l, exitOK
}

// oneLine flattens a (joined, multi-line) error to one line, without the
// "dlock: " that the command's own prefix makes redundant.
func oneLine(err error) string {
	return strings.TrimPrefix(strings.Join(strings.Fields(err.Error()), " "), "dlock: ")
}

// newID returns 8 random hex digits, to keep the names of one run apart
// from another's on a shared backend.
func newID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
