package safety

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// row is one line of the SAFETY table: a backend under one fault.
type row struct {
	backend, fault string
	guard          bool
	runs           int
	Result
}

var table rows[row]

// rows are a table's rows, which tests running at once add to.
type rows[R any] struct {
	mu   sync.Mutex
	rows []R
}

func (t *rows[R]) add(r R) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.rows = append(t.rows, r)
}

// all returns the rows added so far.
func (t *rows[R]) all() []R {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.rows)
}

// report logs a run's result and adds it to the table. With the guard on,
// a stale write accepted is always an error.
func report(t *testing.T, backend, fault string, guard bool, runs int, r Result) {
	t.Helper()
	t.Logf("%s / %s: runs %d, acquisitions %d, (a) overlaps %d (unnoticed %d, seen held after the other's grant %d), (b) stale writes accepted %d (guard %v), (c) token regressions %d; writes %d, refused %d, accepted with another client's token %d; grants beyond the kind's bound %d; bad observations %d (abandoned keys shown %d); runs not linearizable %d (undecided %d)",
		backend, fault, runs, r.Acquisitions, r.Overlaps, r.Unnoticed, r.StillHeld, r.StaleAccepted, guard, r.Regressions, r.Writes, r.Rejected, r.SharedAccepted, r.Excess, r.BadObservations, r.Abandoned, r.NotLinearizable, r.LinearUnknown)
	if guard && r.StaleAccepted != 0 {
		t.Errorf("%d stale writes got through the guard", r.StaleAccepted)
	}
	table.add(row{backend: backend, fault: fault, guard: guard, runs: runs, Result: r})
}

// writeTable writes the table as markdown, at full size or when
// -safety.table names a file.
func writeTable() error {
	path := *tableFlag
	if path == "" {
		if !full() {
			return nil
		}
		path = filepath.Join(os.TempDir(), "dlock-safety-table.md")
	}
	var b strings.Builder
	size := "small"
	if full() {
		size = "full"
	}
	fmt.Fprintf(&b, "Measured %s, size %s.\n\n", time.Now().UTC().Format("2006-01-02"), size)
	b.WriteString("| backend | fault | runs / acquisitions | (a) overlaps (unnoticed / seen held after the other's grant) | (b) stale writes accepted | (c) token regressions | writes refused by the guard | writes accepted with another client's token | (d) grants beyond the kind's bound | runs not linearizable |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range table.all() {
		b64 := fmt.Sprint(r.StaleAccepted)
		if !r.guard {
			b64 += " (guard off)"
		}
		lin := fmt.Sprint(r.NotLinearizable)
		if r.LinearUnknown > 0 {
			lin += fmt.Sprintf(" (%d undecided)", r.LinearUnknown)
		}
		fmt.Fprintf(&b, "| %s | %s | %d / %d | %d (%d / %d) | %s | %d | %d | %d | %d | %s |\n",
			r.backend, r.fault, r.runs, r.Acquisitions, r.Overlaps, r.Unnoticed, r.StillHeld, b64, r.Regressions, r.Rejected, r.SharedAccepted, r.Excess, lin)
	}
	writePartTable(&b)
	writeResumeTable(&b)
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, "safety: table written to", path)
	return nil
}
