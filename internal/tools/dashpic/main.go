// Command dashpic draws docs/grafana/dlock.svg, the picture of the Grafana
// dashboard docs/grafana/dlock.json, from a real run: it starts a
// redis-server and a Prometheus of its own on free loopback ports, runs
// Lockers on that Redis (a steady workload, two stalls of the store, two
// deletes of a held lock, and a class function that returns unbounded
// values) with their metrics served as the CLI's --metrics-addr serves
// them, lets Prometheus scrape them every second, then has Prometheus
// evaluate each panel's own queries (read from the dashboard's JSON, with
// every variable set to All and $__rate_interval to a fixed window) over
// the run, and draws the series, panel by panel, where the dashboard's
// gridPos puts them. A panel whose queries return nothing but zeros is an
// error: the picture shows that every panel has data in a real run.
//
// It needs redis-server and prometheus on PATH; run it from the module's
// root, through the script that installs Prometheus:
//
//	bash scripts/dashboard-picture.sh
//	go run ./internal/tools/dashpic -duration 60s -out /tmp/d.svg # a quicker look
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/dlockgo/dlock/internal/promexport"
	"github.com/redis/go-redis/v9"
)

// options are the command's flags.
type options struct {
	dashboard, out, prometheus string
	duration, rateInterval     time.Duration
}

func main() {
	var o options
	flag.StringVar(&o.dashboard, "dashboard", "docs/grafana/dlock.json", "the Grafana dashboard whose panels to draw")
	flag.StringVar(&o.out, "out", "docs/grafana/dlock.svg", "the SVG file to write")
	flag.StringVar(&o.prometheus, "prometheus", "prometheus", "the Prometheus server binary")
	flag.DurationVar(&o.duration, "duration", 150*time.Second, "how long the workload runs")
	flag.DurationVar(&o.rateInterval, "rate-interval", 10*time.Second, "the window that replaces $__rate_interval")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, o)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "dashpic:", err)
		os.Exit(1)
	}
}

// run starts the servers, runs the workload, queries Prometheus and
// writes the picture; whatever it started is stopped and removed before
// it returns.
func run(ctx context.Context, o options) error {
	dash, err := readDashboard(o.dashboard)
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "dashpic")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)

	redisAddr, err := freeAddr()
	if err != nil {
		return err
	}
	rs, err := startServer(tmp, "redis", "redis-server", "--port", portOf(redisAddr), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", tmp)
	if err != nil {
		return err
	}
	defer rs.stop()
	ctl := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer ctl.Close()
	if err := rs.waitReady(ctx, func() error { return ctl.Ping(ctx).Err() }); err != nil {
		return err
	}

	stopped := make(chan error, 1)
	metrics, err := promexport.Serve("127.0.0.1:0", func(err error) { stopped <- err })
	if err != nil {
		return err
	}
	defer metrics.Close()

	prom, err := startPrometheus(ctx, o.prometheus, tmp, metrics.Addr)
	if err != nil {
		return err
	}
	defer prom.stop()

	fmt.Fprintf(os.Stderr, "dashpic: redis-server %s, metrics %s, Prometheus %s; running the workload for %v\n",
		redisAddr, metrics.Addr, prom.url, o.duration)
	w, err := runWorkload(ctx, redisAddr, ctl, metrics.Provider, o.duration)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "dashpic: workload outcomes: %s\n", w.outcomes())
	select {
	case err := <-stopped:
		return fmt.Errorf("the metrics server stopped: %w", err)
	default:
	}
	// Two more scrapes, so that the end of the run is in Prometheus.
	if err := sleep(ctx, 2500*time.Millisecond); err != nil {
		return err
	}
	panels, err := queryPanels(ctx, prom.url, dash, w.start, w.end, o.rateInterval)
	if err != nil {
		return err
	}
	svg := drawDashboard(dash, panels, w, caption(w, o))
	if err := os.WriteFile(o.out+".tmp", []byte(svg), 0o644); err != nil {
		return err
	}
	if err := os.Rename(o.out+".tmp", o.out); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "dashpic: wrote %s\n", o.out)
	return nil
}

// caption is the picture's last lines: when, what ran, and how to redraw.
func caption(w *workload, o options) []string {
	return []string{
		fmt.Sprintf("A real run on %s UTC, scraped every second; each panel's queries from dlock.json evaluated by Prometheus with backend and class = All, $__rate_interval = %v, step 1 s.",
			w.start.UTC().Format("2006-01-02 15:04"), o.rateInterval),
		fmt.Sprintf("Workload, %v: 3 Lockers on one redis-server (TTL %v, read_timeout %s) lock orders/* (10 names, short holds), cron/nightly (a TryAcquire a second each)",
			o.duration.Round(time.Second), ttl, readTimeout),
		fmt.Sprintf("and reports/daily (held 3-8 s, waits of %v at most). Red bands: the store stalls (CLIENT PAUSE %v); orange lines: an operator deletes the held reports lock;",
			reportsWait, stallFor),
		"blue band: a 4th Locker, whose class function returns whole names, takes 250 new names.   Redraw: bash scripts/dashboard-picture.sh",
	}
}

// server is a process the program started, with its output in a log file.
type server struct {
	what, log string
	cmd       *exec.Cmd
	done      chan struct{} // closed when the process has exited
}

// startServer starts name with args, its output in dir/what.log.
func startServer(dir, what, name string, args ...string) (*server, error) {
	logPath := filepath.Join(dir, what+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", what, err)
	}
	s := &server{what: what, log: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait() // it exits when stop kills it, or on its own (waitReady says)
		logf.Close()
		close(s.done)
	}()
	return s, nil
}

// waitReady waits until ready succeeds, for 20 s at the most; it fails at
// once, with the end of the server's log, if the server exits.
func (s *server) waitReady(ctx context.Context, ready func() error) error {
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := ready()
		if err == nil {
			return nil
		}
		select {
		case <-s.done:
			return fmt.Errorf("%s exited: %s", s.what, s.logTail())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after 20 s: %v; log: %s", s.what, err, s.logTail())
		}
	}
}

// logTail is the end of the server's log.
func (s *server) logTail() string {
	b, err := os.ReadFile(s.log)
	if err != nil {
		return err.Error()
	}
	return string(b[max(0, len(b)-1500):])
}

// stop ends the process, politely first, and waits for it.
func (s *server) stop() {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}

// promServer is the Prometheus the program started.
type promServer struct {
	*server
	url string
}

// startPrometheus starts a Prometheus on a free loopback port, its data
// under dir, scraping the metrics at target every second, and waits for
// its first scrape of them.
func startPrometheus(ctx context.Context, bin, dir, target string) (*promServer, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	config := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: dlock
    static_configs:
      - targets: [%q]
`, target)
	configPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(configPath, []byte(config), 0o644); err != nil {
		return nil, err
	}
	s, err := startServer(dir, "prometheus", bin, "--config.file="+configPath,
		"--storage.tsdb.path="+filepath.Join(dir, "tsdb"), "--web.listen-address="+addr, "--log.level=warn")
	if err != nil {
		return nil, err
	}
	p := &promServer{server: s, url: "http://" + addr}
	err = s.waitReady(ctx, func() error {
		m, err := promQuery(ctx, p.url, "/api/v1/query", map[string]string{"query": `up{job="dlock"} == 1`})
		if err == nil && len(m) == 0 {
			err = errors.New("no scrape of the metrics yet")
		}
		return err
	})
	if err != nil {
		p.stop()
		return nil, err
	}
	return p, nil
}

// freeAddr returns a loopback address with a port free now.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// portOf is the port of a host:port address.
func portOf(addr string) string {
	_, port, _ := net.SplitHostPort(addr)
	return port
}

// sleep waits for d, or returns ctx's error when it ends first.
func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-time.After(d):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// httpClient bounds every request to Prometheus.
var httpClient = &http.Client{Timeout: 30 * time.Second}

// unixSeconds formats t for Prometheus's API.
func unixSeconds(t time.Time) string {
	return strconv.FormatFloat(float64(t.UnixMilli())/1000, 'f', 3, 64)
}

// expand fills a Grafana legendFormat ("{{result}} {{backend}}") with a
// series' labels.
func expand(format string, labels map[string]string) string {
	out := format
	for k, v := range labels {
		out = strings.ReplaceAll(out, "{{"+k+"}}", v)
	}
	return strings.Join(strings.Fields(out), " ")
}
