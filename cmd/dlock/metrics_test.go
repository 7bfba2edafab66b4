package main

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestRunServesMetrics runs dlock run --metrics-addr on a free loopback
// port, scrapes /metrics while the command holds the lock, and finds
// dlock's series there: one successful acquisition, one lease held, and
// no lock name among the labels.
func TestRunServesMetrics(t *testing.T) {
	c := newCLI(t)
	name := uniqueName(t, "metrics")
	p := c.start("run", "--metrics-addr", "127.0.0.1:0", "--log-level", "info", "--log-json", name, "--", "sh", "-c", "echo ready; exec sleep 30")
	if l := p.line(30 * time.Second); l != "ready" {
		t.Fatalf("command printed %q", l)
	}
	addr := ""
	for _, line := range strings.Split(p.stderr.String(), "\n") {
		var rec struct {
			Msg  string `json:"msg"`
			Addr string `json:"addr"`
		}
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "dlock: serving metrics" {
			addr = rec.Addr
		}
	}
	if !strings.HasPrefix(addr, "127.0.0.1:") {
		t.Fatalf("no 'serving metrics' log line with a loopback address; stderr: %s", p.stderr)
	}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /metrics: %d, %v", resp.StatusCode, err)
	}
	text := string(body)
	for _, want := range []string{
		`dlock_acquisitions_total{backend="file",otel_scope_name="github.com/dlockgo/dlock"`,
		`result="acquired"} 1`,
		`dlock_held{backend="file"`,
		`dlock_acquire_duration_seconds_bucket{`,
		`le="0.001"}`, // buckets in seconds, not OpenTelemetry's default ones
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if !hasSample(text, "dlock_held", "1") {
		t.Errorf("/metrics: dlock_held is not 1 while the command holds the lock")
	}
	if strings.Contains(text, name) {
		t.Errorf("/metrics contains the lock name %q: names must not be label values", name)
	}
	if t.Failed() {
		t.Logf("/metrics:\n%s", text)
	}
	// The log lines carry the lock's name, backend and token.
	if s := p.stderr.String(); !strings.Contains(s, `"name":"`+name+`"`) || !strings.Contains(s, `"token":`) || !strings.Contains(s, `"backend":"file://"`) {
		t.Errorf("the info log lacks name, token or backend: %s", s)
	}
	p.signal(syscall.SIGTERM)
	p.wait(30 * time.Second)
}

// hasSample reports whether text has a sample of metric with value v.
func hasSample(text, metric, v string) bool {
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, metric+"{") && strings.HasSuffix(line, "} "+v) {
			return true
		}
	}
	return false
}
