package interop

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// resource is the thing the holders of one lock share, on every side of a
// test: a directory that a holder marks on entry and unmarks before it
// releases. Every side, whatever its language or process (the test's own
// goroutines, a JVM, a Python interpreter, etcdctl's child), does the same
// three file operations, each atomic on its own:
//
//	enter  mkdir <dir>/held; when it exists already, append a line to
//	       <dir>/overlaps (two holders at once)
//	       then append "<who>\n" to <dir>/log
//	exit   rmdir <dir>/held
//
// A reader of a readers-writer lock marks it as shared instead: it makes a
// directory of its own under <dir>/readers, and appends to overlaps when
// <dir>/held exists (a writer holds too); a writer appends to overlaps
// when <dir>/readers is not empty. A mark exists only while its holder
// holds, so two marks at once are two holds at once.
//
// so the gauge needs no messages between the processes, and an overlap
// is seen whichever sides it involves.
type resource struct {
	dir     string
	readers atomic.Int64 // names the readers' marks
}

// newResource returns an unmarked resource in a directory of t's.
func newResource(t testing.TB) *resource {
	t.Helper()
	return &resource{dir: t.TempDir()}
}

// enter marks the resource as held by who.
func (r *resource) enter(who string) {
	if err := os.Mkdir(filepath.Join(r.dir, "held"), 0o755); errors.Is(err, fs.ErrExist) {
		appendLine(filepath.Join(r.dir, "overlaps"), who)
	}
	if names, _ := os.ReadDir(filepath.Join(r.dir, "readers")); len(names) > 0 {
		appendLine(filepath.Join(r.dir, "overlaps"), who)
	}
	appendLine(filepath.Join(r.dir, "log"), who)
}

// exit unmarks the resource.
func (r *resource) exit() { _ = os.Remove(filepath.Join(r.dir, "held")) }

// enterShared marks the resource as read by who; exit with the function
// it returns.
func (r *resource) enterShared(who string) (exit func()) {
	readers := filepath.Join(r.dir, "readers")
	_ = os.MkdirAll(readers, 0o755)
	mark := filepath.Join(readers, fmt.Sprintf("go-%s-%d", who, r.readers.Add(1)))
	if err := os.Mkdir(mark, 0o755); err != nil {
		panic(err)
	}
	if _, err := os.Stat(filepath.Join(r.dir, "held")); err == nil {
		appendLine(filepath.Join(r.dir, "overlaps"), who)
	}
	appendLine(filepath.Join(r.dir, "log"), who)
	return func() { _ = os.Remove(mark) }
}

// entries returns who entered, in order of entry.
func (r *resource) entries() []string {
	b, _ := os.ReadFile(filepath.Join(r.dir, "log"))
	return strings.Fields(string(b))
}

// check fails t if two holders ever held at once, or if fewer than want
// entries happened.
func (r *resource) check(t testing.TB, want int) {
	t.Helper()
	if b, err := os.ReadFile(filepath.Join(r.dir, "overlaps")); err == nil {
		t.Errorf("holders overlapped %d times (entering: %s)", len(strings.Fields(string(b))), strings.Join(strings.Fields(string(b)), " "))
	}
	if n := len(r.entries()); n < want {
		t.Errorf("%d entries; want at least %d", n, want)
	}
}

// appendLine appends s and a newline to the file p, in one write.
func appendLine(p, s string) {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		panic(err)
	}
	defer f.Close()
	if _, err := f.WriteString(s + "\n"); err != nil {
		panic(err)
	}
}
