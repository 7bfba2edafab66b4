package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// dashboard is what the picture takes from the Grafana dashboard's JSON.
type dashboard struct {
	Title  string
	Panels []panel
}

// panel is one of the dashboard's panels.
type panel struct {
	Title   string
	GridPos struct{ X, Y, W, H int }
	// FieldConfig.Defaults.Unit is Grafana's unit of the values: "s",
	// "ops" (per second) or "short" (a plain number).
	FieldConfig struct {
		Defaults struct{ Unit string }
	}
	Targets []struct{ Expr, LegendFormat string }
}

// readDashboard reads the dashboard at path.
func readDashboard(path string) (*dashboard, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var d dashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(d.Panels) == 0 {
		return nil, fmt.Errorf("%s: no panels", path)
	}
	return &d, nil
}

// series is one line of a panel: its legend and its points, NaN where
// Prometheus had no value at a step.
type series struct {
	legend string
	values []float64 // one per step from the range's start
}

// flat reports whether s is zero or missing at every step.
func (s series) flat() bool {
	return !slices.ContainsFunc(s.values, func(v float64) bool { return !math.IsNaN(v) && v != 0 })
}

// queryPanels evaluates every panel's queries over [start, end] with a
// step of a second, as the dashboard does with every variable set to All
// (".*") and $__rate_interval set to rateInterval. It fails for a panel
// whose queries give no series, or only series at zero throughout.
func queryPanels(ctx context.Context, promURL string, d *dashboard, start, end time.Time, rateInterval time.Duration) ([][]series, error) {
	vars := strings.NewReplacer(`$backend`, `.*`, `$class`, `.*`, `$__rate_interval`, rateInterval.String())
	steps := int(end.Sub(start)/time.Second) + 1
	out := make([][]series, len(d.Panels))
	for i, p := range d.Panels {
		for _, t := range p.Targets {
			q := vars.Replace(t.Expr)
			res, err := promQuery(ctx, promURL, "/api/v1/query_range", map[string]string{
				"query": q, "start": unixSeconds(start), "end": unixSeconds(end), "step": "1",
			})
			if err != nil {
				return nil, fmt.Errorf("panel %q: %s: %w", p.Title, q, err)
			}
			for _, r := range res {
				s := series{legend: expand(t.LegendFormat, r.Metric), values: make([]float64, steps)}
				for j := range s.values {
					s.values[j] = math.NaN()
				}
				for _, v := range r.Values {
					j := int(math.Round(v.t - float64(start.UnixMilli())/1000))
					if j >= 0 && j < steps {
						s.values[j] = v.v
					}
				}
				out[i] = append(out[i], s)
			}
		}
		if !slices.ContainsFunc(out[i], func(s series) bool { return !s.flat() }) {
			var exprs []string
			for _, t := range p.Targets {
				exprs = append(exprs, vars.Replace(t.Expr))
			}
			return nil, fmt.Errorf("panel %q: in the run, its queries give %d series, none above zero: %s",
				p.Title, len(out[i]), strings.Join(exprs, "; "))
		}
		slices.SortStableFunc(out[i], func(a, b series) int { return strings.Compare(a.legend, b.legend) })
	}
	return out, nil
}

// promSeries is one series of a Prometheus API answer.
type promSeries struct {
	Metric map[string]string
	Values []promPoint // a range query's
	Value  promPoint   // an instant query's
}

// promPoint is a [time, "value"] pair of the Prometheus API.
type promPoint struct {
	t, v float64
}

// UnmarshalJSON reads [1712345678.9, "0.25"].
func (p *promPoint) UnmarshalJSON(b []byte) error {
	var pair [2]any
	if err := json.Unmarshal(b, &pair); err != nil {
		return err
	}
	t, ok1 := pair[0].(float64)
	v, ok2 := pair[1].(string)
	if !ok1 || !ok2 {
		return fmt.Errorf("not a [time, value] pair: %s", b)
	}
	f, err := strconv.ParseFloat(v, 64)
	p.t, p.v = t, f
	return err
}

// promQuery asks Prometheus's HTTP API at path with params.
func promQuery(ctx context.Context, promURL, path string, params map[string]string) ([]promSeries, error) {
	form := url.Values{}
	for k, v := range params {
		form.Set(k, v)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, promURL+path, strings.NewReader(form.Encode()))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := httpClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	var ans struct {
		Status, Error string
		Data          struct{ Result []promSeries }
	}
	if err := json.Unmarshal(body, &ans); err != nil {
		return nil, fmt.Errorf("%s: %d %.200s", path, resp.StatusCode, body)
	}
	if ans.Status != "success" {
		return nil, fmt.Errorf("%s: %s", path, ans.Error)
	}
	return ans.Data.Result, nil
}
