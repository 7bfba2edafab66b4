package locktest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/internal/doctor"
)

// Diagnose runs d's Diagnose for locks of time to live ttl, within a
// minute, logging each finding as dlock doctor prints it, and failing t
// on an error or on a finding that is not complete (no
// check name or text; a warning or failure without why, fix and docs).
func Diagnose(t testing.TB, d driver.Diagnoser, ttl time.Duration) []driver.Finding {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	fs, err := d.Diagnose(ctx, ttl)
	if err != nil {
		t.Fatalf("Diagnose: %v", err)
	}
	for _, f := range fs {
		t.Log(doctor.Line(f))
		if f.Check == "" || f.Found == "" {
			t.Errorf("a finding without check or text: %+v", f)
		}
		if f.Severity != driver.OK && (f.Why == "" || f.Fix == "" || !strings.HasPrefix(f.Doc, "docs/")) {
			t.Errorf("a %s finding without why, fix or docs: %+v", f.Severity, f)
		}
	}
	return fs
}

// WantFinding fails t unless fs has a finding of check with severity
// want (each of them, where several servers report the check) whose text
// contains found.
func WantFinding(t testing.TB, fs []driver.Finding, check string, want driver.Severity, found string) {
	t.Helper()
	seen := false
	for _, f := range fs {
		if f.Check != check {
			continue
		}
		seen = true
		if f.Severity != want || !strings.Contains(f.Found, found) {
			t.Errorf("%s: %s %q; want %s, found containing %q", check, f.Severity, f.Found, want, found)
		}
	}
	if !seen {
		t.Errorf("no %s finding among %+v", check, fs)
	}
}

// NoFail fails t if a finding of fs is a failure.
func NoFail(t testing.TB, fs []driver.Finding) {
	t.Helper()
	for _, f := range fs {
		if f.Severity == driver.Fail {
			t.Errorf("fail on a well-configured store: %s: %s", f.Check, f.Found)
		}
	}
}
