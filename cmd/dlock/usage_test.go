package main

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestUsageErrors: bad flags, arguments and backend URLs give one clear
// line on stderr and a non-zero exit, never a stack trace.
func TestUsageErrors(t *testing.T) {
	c := newCLI(t)
	for _, tc := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"run", "--bogus", "job", "--", "true"}, exitUsage, "-bogus"},
		{[]string{"run", "--", "true"}, exitUsage, "missing lock NAME"},
		{[]string{"run", "job"}, exitUsage, "missing COMMAND"},
		{[]string{"run", "--wait", "1s", "--no-wait", "job", "--", "true"}, exitUsage, "exclude"},
		{[]string{"run", "--wait", "soon", "job", "--", "true"}, exitUsage, "soon"},
		{[]string{"run", "--ttl", "1ms", "job", "--", "true"}, exitUsage, "minimum"},
		{[]string{"run", "--busy-exit-code", "300", "job", "--", "true"}, exitUsage, "0 to 255"},
		{[]string{"run", "a//b", "--", "true"}, exitUsage, "invalid name"},
		{[]string{"run", "--log-level", "loud", "job", "--", "true"}, exitUsage, "loud"},
		{[]string{"run", "--backend", "foo://x", "job", "--", "true"}, exitUsage, `unknown scheme "foo"`},
		{[]string{"run", "--backend", "127.0.0.1:6379", "job", "--", "true"}, exitUsage, "bad backend URL"},
		{[]string{"run", "--backend", "redis://[::1", "job", "--", "true"}, exitUsage, "bad backend URL"},
		{[]string{"run", "--backend", "redis://127.0.0.1:6379?bogus=1", "job", "--", "true"}, exitUsage, `"bogus"`},
		{[]string{"run", "--backend", "file://remote-host/dir", "job", "--", "true"}, exitUsage, "host"},
		{[]string{"run", "--backend", "redis://127.0.0.1:1", "job", "--", "true"}, exitUnavailable, "127.0.0.1:1"},
		{[]string{"status", "a", "b"}, exitUsage, "at most one"},
		{[]string{"status", "--backend", "redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3"}, exitUnavailable, "no quorum"},
		{[]string{"bench", "--duration", "1ns"}, exitUsage, "duration"},
		{[]string{"demo", "--workers", "1"}, exitUsage, "workers"},
		{[]string{"version", "extra"}, exitUsage, "no arguments"},
		{[]string{"frobnicate"}, exitUsage, `unknown command "frobnicate"`},
		{[]string{"--backend", "mem://", "run"}, exitUsage, "after the command"},
		{nil, exitUsage, "Usage"},
	} {
		r := c.run(tc.args...)
		if r.code != tc.code {
			t.Errorf("dlock %q: exit %d, want %d (stderr %q)", tc.args, r.code, tc.code, r.stderr)
			continue
		}
		if !strings.Contains(r.stderr, tc.says) {
			t.Errorf("dlock %q: stderr %q does not say %q", tc.args, r.stderr, tc.says)
		}
		if tc.args != nil {
			checkOneLine(t, strings.Join(tc.args, " "), r.stderr)
		}
		if r.stdout != "" {
			t.Errorf("dlock %q: printed on stdout: %q", tc.args, r.stdout)
		}
	}
}

// TestHelp: every command answers --help on stdout, with examples, and
// exits 0.
func TestHelp(t *testing.T) {
	c := newCLI(t)
	r := c.run("--help")
	if r.code != 0 {
		t.Fatalf("dlock --help: exit %d", r.code)
	}
	for _, cmd := range commands() {
		if !strings.Contains(r.stdout, cmd.name) {
			t.Errorf("dlock --help does not list %q", cmd.name)
		}
		for _, h := range [][]string{{cmd.name, "--help"}, {cmd.name, "-h"}, {"help", cmd.name}} {
			r := c.run(h...)
			if r.code != 0 || r.stderr != "" {
				t.Errorf("dlock %q: exit %d, stderr %q", h, r.code, r.stderr)
			}
			for _, want := range []string{"Usage: dlock " + cmd.name, "Flags:", "-backend", "Examples:"} {
				if !strings.Contains(r.stdout, want) {
					t.Errorf("dlock %q does not show %q", h, want)
				}
			}
		}
	}
}

func TestVersion(t *testing.T) {
	c := newCLI(t)
	for _, args := range [][]string{{"version"}, {"--version"}} {
		r := c.run(args...)
		if r.code != 0 || !strings.HasPrefix(r.stdout, "dlock ") || !strings.Contains(r.stdout, " go1.") {
			t.Errorf("dlock %q: exit %d, %q; want dlock <version> ... go1.N", args, r.code, r.stdout)
		}
	}
}

// TestCLIDocFlags: docs/CLI.md names every command and every flag that
// `dlock <command> --help` shows, and no flag that no command has.
func TestCLIDocFlags(t *testing.T) {
	doc, err := os.ReadFile("../../docs/CLI.md")
	if err != nil {
		t.Fatal(err)
	}
	c := newCLI(t)
	flagLine := regexp.MustCompile(`(?m)^  --([a-z][a-z-]*)`)
	// --help and --version are answered before any FlagSet; --flag is the
	// doc's generic example.
	have := map[string]bool{"help": true, "version": true, "flag": true}
	for _, cmd := range commands() {
		if !strings.Contains(string(doc), "`dlock "+cmd.name) {
			t.Errorf("docs/CLI.md does not show dlock %s", cmd.name)
		}
		r := c.run(cmd.name, "--help")
		for _, m := range flagLine.FindAllStringSubmatch(r.stdout, -1) {
			have[m[1]] = true
			if !strings.Contains(string(doc), "--"+m[1]) {
				t.Errorf("dlock %s --%s is not in docs/CLI.md", cmd.name, m[1])
			}
		}
	}
	if len(have) == 3 {
		t.Fatal("no flags found in the commands' --help")
	}
	for _, m := range regexp.MustCompile("`[^`]*?--([a-z][a-z-]*)").FindAllStringSubmatch(string(doc), -1) {
		if !have[m[1]] {
			t.Errorf("docs/CLI.md names --%s, which no command has", m[1])
		}
	}
}
