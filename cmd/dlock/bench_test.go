package main

import (
	"strings"
	"testing"

	"github.com/dlockgo/dlock/internal/testenv"
)

// TestBenchSideBySide runs a short bench on two backends: one column each,
// every row filled, progress on stderr.
func TestBenchSideBySide(t *testing.T) {
	c := newCLI(t)
	redisURL := "redis://" + testenv.RedisAddr(t)
	fileURL := "file://" + t.TempDir()
	r := c.run("bench", "--duration", "150ms", "--concurrency", "4", "--backend", redisURL, "--backend", fileURL)
	if r.code != 0 {
		t.Fatalf("dlock bench: exit %d: %s", r.code, r.stderr)
	}
	lines := strings.Split(strings.TrimRight(r.stdout, "\n"), "\n")
	if len(lines) != 10 {
		t.Fatalf("bench printed %d lines, want a header and 9 rows:\n%s", len(lines), r.stdout)
	}
	if !strings.Contains(lines[0], redisURL) || !strings.Contains(lines[0], fileURL) {
		t.Errorf("header %q does not name both backends", lines[0])
	}
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		if len(f) < 4 {
			t.Errorf("row %q lacks a value per backend", l)
			continue
		}
		for _, v := range f[len(f)-2:] {
			if v == "0" || strings.HasPrefix(v, "0µs") || v == "0%" && !strings.Contains(l, "handoffs") {
				t.Errorf("row %q has a zero measurement", l)
			}
		}
	}
	for _, phase := range []string{"sequential", "parallel", "contended"} {
		if strings.Count(r.stderr, phase) != 2 {
			t.Errorf("stderr shows the %s phase %d times, want once per backend:\n%s", phase, strings.Count(r.stderr, phase), r.stderr)
		}
	}
}
