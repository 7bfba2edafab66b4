package main

import (
	"strings"
	"testing"
)

// TestDemo runs the demo on its default backend (a temporary directory of
// lock files): without a lock it oversells, with one it does not, and the
// guard rejects the paused holder's write.
func TestDemo(t *testing.T) {
	c := newCLI(t)
	r := c.run("demo")
	if r.code != 0 {
		t.Fatalf("dlock demo: exit %d: %s", r.code, r.stderr)
	}
	for _, want := range []string{"OVERSOLD by", "sold 10 items from a stock of 10 — correct", "expired", "REJECTED"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("demo output lacks %q:\n%s", want, r.stdout)
		}
	}
	for _, bad := range []string{"WRONG", "not expired"} {
		if strings.Contains(r.stdout, bad) {
			t.Errorf("demo output says %q:\n%s", bad, r.stdout)
		}
	}
	if r.stderr != "" {
		t.Errorf("demo wrote on stderr: %q", r.stderr)
	}
	if r.elapsed > 20e9 {
		t.Errorf("demo took %v; it should take seconds", r.elapsed)
	}
}
