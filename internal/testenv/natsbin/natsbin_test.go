package natsbin

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeNATS writes a script that prints out as nats-server --version does.
func fakeNATS(t *testing.T, out string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "nats-server")
	if err := os.WriteFile(p, []byte("#!/bin/sh\necho '"+out+"'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestFindNATSVersion(t *testing.T) {
	for _, c := range []struct {
		out, version string // version "": refused
	}{
		{"nats-server: v2.15.2", "v2.15.2"},
		{"nats-server: v2.11.0", "v2.11.0"},
		{"nats-server: v3.0.1", "v3.0.1"},
		{"nats-server: v2.9.10", ""},
		{"nats-server: v2.10.29", ""},
		{"no version here", ""},
	} {
		t.Setenv("DLOCK_NATS_BIN", fakeNATS(t, c.out))
		bin, v, err := Find()
		if c.version == "" {
			if err == nil {
				t.Errorf("%q: accepted %s %s", c.out, bin, v)
			} else if !strings.Contains(err.Error(), ServicesScript) {
				t.Errorf("%q: error does not name %s: %v", c.out, ServicesScript, err)
			}
			continue
		}
		if err != nil || v != c.version {
			t.Errorf("%q: got %q, %v; want %s", c.out, v, err, c.version)
		}
	}
}

func TestFindNATSMissing(t *testing.T) {
	t.Setenv("DLOCK_NATS_BIN", filepath.Join(t.TempDir(), "none"))
	if _, _, err := Find(); err == nil || !strings.Contains(err.Error(), ServicesScript) {
		t.Fatalf("missing binary: %v, want an error naming %s", err, ServicesScript)
	}
}
