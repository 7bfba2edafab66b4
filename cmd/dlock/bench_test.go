package main

import (
	"bytes"
	"encoding/csv"
	"os"
	"path/filepath"
	"strconv"
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

// TestBenchScale runs short sweeps on the machine's Redis: every point
// measured, the server's CPU and memory read from /proc, and the CSV and
// the three charts written.
func TestBenchScale(t *testing.T) {
	c := newCLI(t)
	redisURL := "redis://" + testenv.RedisAddr(t)
	out := t.TempDir()
	r := c.run("bench", "--scale", "--backend", redisURL, "--out", out,
		"--waiters", "1,4", "--held", "1,200", "--clients", "1,2", "--step", "200ms", "--fill", "10s")
	if r.code != 0 {
		t.Fatalf("dlock bench --scale: exit %d: %s", r.code, r.stderr)
	}
	b, err := os.ReadFile(filepath.Join(out, "scale.csv"))
	if err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(bytes.NewReader(b)).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, row := range rows[1:] {
		if row[6] != "" {
			t.Errorf("point %s/%s has a note: %s", row[1], row[2], row[6])
		}
		v, _ := strconv.ParseFloat(row[5], 64)
		got[row[1]+"/"+row[2]+"/"+row[4]] = v
	}
	for _, k := range []string{
		"waiters/4/acquisitions_per_s", "waiters/4/server_cpu_us_per_acquisition",
		"held/200/acquire_release_p50_us", "held/200/store_entries",
		"clients/2/ops_per_s", "clients/2/server_cpu_us_per_op", "clients/2/client_cpu_us_per_op",
	} {
		if got[k] <= 0 {
			t.Errorf("%s = %v, want a positive measurement", k, got[k])
		}
	}
	if h := got["waiters/4/handoff_to_other_pct"]; h < 50 {
		t.Errorf("4 waiters on redis: %.0f%% of handoffs to another waiter, want most", h)
	}
	for _, f := range []string{"waiters.svg", "held.svg", "clients.svg"} {
		svg, err := os.ReadFile(filepath.Join(out, f))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(svg, []byte("<svg")) || !bytes.Contains(svg, []byte("<polyline")) {
			t.Errorf("%s: no chart with a line", f)
		}
	}
	if !strings.Contains(r.stdout, "redis") || !strings.Contains(r.stdout, "held") {
		t.Errorf("summary lacks the backend or a sweep:\n%s", r.stdout)
	}
}

// TestBenchScaleUsage: bad sweep flags are usage errors naming the flag.
func TestBenchScaleUsage(t *testing.T) {
	c := newCLI(t)
	for _, args := range [][]string{
		{"--waiters", "1,x"},
		{"--held", "10,5"},
		{"--clients", "0"},
		{"--step", "1ms"},
		{"--fill", "10ms"},
		{"--fleet", "0"},
	} {
		r := c.run(append([]string{"bench", "--scale", "--backend", "mem://"}, args...)...)
		if r.code != exitUsage || !strings.Contains(r.stderr, args[0]) {
			t.Errorf("bench --scale %v: exit %d, stderr %q; want a usage error naming %s", args, r.code, r.stderr, args[0])
		}
	}
}
