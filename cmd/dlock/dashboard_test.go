package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/locktest"
	_ "github.com/dlockgo/dlock/redislock"
)

// dashboardPath is the Grafana dashboard docs/OBSERVABILITY.md describes.
const dashboardPath = "../../docs/grafana/dlock.json"

// TestDashboardMatchesExport: every query of the Grafana dashboard names
// metrics and labels that dlock exports to Prometheus, as a run on a real
// Redis shows them through the CLI's exporter (serveMetrics), so that the
// dashboard cannot drift from the instruments. The run makes every series
// the dashboard reads appear: acquisitions of every result, a wait, a
// renewal, a renewal error and a loss, a release, and names folded past
// the first 100 classes.
func TestDashboardMatchesExport(t *testing.T) {
	ctx := locktest.Context(t, 2*time.Minute)
	var logs strings.Builder
	m, err := serveMetrics("127.0.0.1:0", slog.New(slog.NewJSONHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	var rec struct{ Addr string }
	if err := json.Unmarshal([]byte(logs.String()), &rec); err != nil || rec.Addr == "" {
		t.Fatalf("no address in the metrics server's log line %q (%v)", logs.String(), err)
	}
	exposition := func() string { return scrape(t, rec.Addr) }

	prefix := "dash" + locktest.RandomHex(4) + ":"
	open := func() *dlock.Locker {
		class := func(name string) string { c, _, _ := strings.Cut(name, "/"); return c }
		return locktest.Opened(t)(dlock.Open(ctx, "redis://"+testenv.RedisAddr(t)+"?prefix="+prefix,
			dlock.WithMeterProvider(m.Provider), dlock.WithNameClass(class), dlock.WithTTL(time.Second)))
	}
	a, b := open(), open()
	held := locktest.Must(t)(a.Acquire(ctx, "orders/1"))
	if _, err := b.TryAcquire(ctx, "orders/1"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryAcquire of a held lock: %v", err)
	}
	wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	_, err = b.Acquire(wctx, "orders/1")
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a wait past its deadline: %v", err)
	}
	if !locktest.Eventually(time.Minute, func() bool { return strings.Contains(exposition(), "dlock_renewals_total{") }) {
		t.Fatal("no renewal within a minute of a 1s lease")
	}
	// An operator deletes the lock: the next renewal finds it gone.
	if err := testenv.RedisClient(t).Del(ctx, prefix+"{orders/1}").Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-held.Done():
	case <-ctx.Done():
		t.Fatal("the lease whose lock was deleted did not end")
	}
	if err := locktest.Must(t)(a.Acquire(ctx, "reports/daily")).Release(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range 100 { // with orders and reports, past 100 classes
		if err := locktest.Must(t)(a.TryAcquire(ctx, fmt.Sprintf("c%d/x", i))).Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	text := exposition()

	raw, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
		Templating struct {
			List []struct{ Name, Query string }
		}
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("%s: %v", dashboardPath, err)
	}
	var queries []string
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			queries = append(queries, tg.Expr)
		}
	}
	for _, v := range dash.Templating.List {
		if v.Query != "prometheus" {
			queries = append(queries, v.Query)
		}
	}
	if len(queries) < 8 {
		t.Fatalf("%s: %d queries; the dashboard lost its panels?", dashboardPath, len(queries))
	}
	for _, q := range queries {
		metrics, labels := promNames(q)
		if len(metrics) == 0 {
			t.Errorf("query %q names no dlock metric", q)
		}
		for _, metric := range metrics {
			for _, label := range labels {
				if !hasLabel(text, metric, label) {
					t.Errorf("query %q: %s has no series with label %s in the export", q, metric, label)
				}
			}
			if len(labels) == 0 && !strings.Contains(text, "\n"+metric+"{") {
				t.Errorf("query %q: %s is not in the export", q, metric)
			}
		}
	}
	if t.Failed() {
		t.Logf("/metrics:\n%s", text)
	}
}

var (
	promMetric  = regexp.MustCompile(`\bdlock_[a-z_]+`)
	promBy      = regexp.MustCompile(`by \(([^)]*)\)`)
	promMatcher = regexp.MustCompile(`([a-z_]+)=~?"`)
	promLabelOf = regexp.MustCompile(`label_values\([a-z_]+, *([a-z_]+)\)`)
)

// scrape returns the Prometheus exposition served at addr's /metrics.
func scrape(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %d, %v", resp.StatusCode, err)
	}
	return string(body)
}

// promNames returns the dlock metrics and the labels a PromQL query (or a
// Grafana label_values query) names.
func promNames(q string) (metrics, labels []string) {
	metrics = promMetric.FindAllString(q, -1)
	for _, m := range promBy.FindAllStringSubmatch(q, -1) {
		for _, l := range strings.Split(m[1], ",") {
			labels = append(labels, strings.TrimSpace(l))
		}
	}
	for _, m := range promMatcher.FindAllStringSubmatch(q, -1) {
		labels = append(labels, m[1])
	}
	for _, m := range promLabelOf.FindAllStringSubmatch(q, -1) {
		labels = append(labels, m[1])
	}
	return metrics, labels
}

// hasLabel reports whether the exposition text has a sample of metric
// with label.
func hasLabel(text, metric, label string) bool {
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, metric+"{") && (strings.Contains(line, "{"+label+`="`) || strings.Contains(line, ","+label+`="`)) {
			return true
		}
	}
	return false
}
