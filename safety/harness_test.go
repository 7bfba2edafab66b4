package safety

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/dlockgo/dlock/fence"
	_ "github.com/dlockgo/dlock/internal/backends" // the in-process clients' URL schemes
	"github.com/dlockgo/dlock/internal/testenv"
)

var (
	fullFlag  = flag.Bool("safety.full", false, "run the full-size suite and write the SAFETY table (also DLOCK_SAFETY=full)")
	tableFlag = flag.String("safety.table", "", "file the SAFETY table is written to (default in full mode: dlock-safety-table.md in the temporary directory)")
)

// full reports whether the suite runs at full size.
func full() bool { return *fullFlag || os.Getenv("DLOCK_SAFETY") == "full" }

// scale returns small in CI and big at full size.
func scale[T any](small, big T) T {
	if full() {
		return big
	}
	return small
}

var (
	buildOnce sync.Once
	buildDir  string
	workerBin string
	buildErr  error
)

// worker returns the path of the worker binary, built once per test run.
func worker(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "dlock-safety-")
		if buildErr != nil {
			return
		}
		workerBin = filepath.Join(buildDir, "worker")
		out, err := exec.Command("go", "build", "-o", workerBin, "github.com/dlockgo/dlock/safety/internal/worker").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build the worker: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return workerBin
}

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	if err := writeTable(); err != nil {
		fmt.Fprintln(os.Stderr, "safety:", err)
		code = max(code, 1)
	}
	if buildDir != "" {
		_ = os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// resource is the fenced resource: an HTTP endpoint that logs every write
// in the order it decided on it. With guard set, a fence.Memory guard
// refuses stale tokens (409); without, every write is accepted.
type resource struct {
	guard bool
	mu    sync.Mutex // orders decisions and the log
	fence fence.Memory
	log   []Write
	srv   *httptest.Server
}

// startResource starts the resource on a free port of ip (loopback when
// empty).
func startResource(t *testing.T, guard bool, ip string) *resource {
	t.Helper()
	r := &resource{guard: guard}
	r.srv = httptest.NewUnstartedServer(http.HandlerFunc(r.write))
	if ip != "" {
		l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
		if err != nil {
			t.Fatal(err)
		}
		r.srv.Listener.Close()
		r.srv.Listener = l
	}
	r.srv.Start()
	t.Cleanup(r.srv.Close)
	return r
}

func (r *resource) url() string { return r.srv.URL + "/write" }

func (r *resource) write(w http.ResponseWriter, req *http.Request) {
	c, err1 := strconv.Atoi(req.FormValue("c"))
	tok, err2 := strconv.ParseUint(req.FormValue("t"), 10, 64)
	if err1 != nil || err2 != nil {
		http.Error(w, "bad write", http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	ok := true
	if r.guard {
		ok = r.fence.Admit(req.Context(), "resource", tok) == nil
	}
	r.log = append(r.log, Write{Client: c, Token: tok, Accepted: ok, At: time.Now().UnixNano()})
	r.mu.Unlock()
	if !ok {
		http.Error(w, "stale token", http.StatusConflict)
	}
}

func (r *resource) writes() []Write {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Write(nil), r.log...)
}

// workload describes one run: n worker processes on one lock.
type workload struct {
	url     string        // backend URL
	urls    []string      // per-client URLs, overriding url where set
	clients int           // number of worker processes
	dur     time.Duration // how long each runs
	ttl     time.Duration // lock TTL
	hold    time.Duration // time between acquiring and writing
	guard   bool          // whether the resource checks tokens
	name    string        // lock name (default: unique per run)
	// holds are per-client hold times, overriding hold where set.
	holds []time.Duration
	// timeout bounds each acquire call (default: the worker's, 5s).
	timeout time.Duration
	// net, when set, is the test network: the resource listens on its
	// gateway, and client i runs on hosts[i] where that is set.
	net   *testenv.Net
	hosts []*testenv.Host
	// kind is what the workers take (worker -kind: mutex, rw, permit,
	// leader) and limit the semaphore's; other kinds than the mutex make
	// no writes.
	kind  string
	limit int
}

// enter is a worker's report that it acquired the lock.
type enter struct {
	client int
	token  uint64
	at     time.Time
}

// workers are the running processes of a workload.
type workers struct {
	cmds   []*exec.Cmd
	enters chan enter // dropped when nobody listens
	done   chan struct{}

	mu     sync.Mutex
	acqs   []Acquisition
	obs    []Observation
	errs   []string
	calls  []Call   // the failed acquire calls
	failed []string // workers that exited with an error
}

// pause stops client's process with SIGSTOP for d, then continues it.
func (w *workers) pause(client int, d time.Duration) {
	p := w.cmds[client].Process
	if p.Signal(syscall.SIGSTOP) != nil {
		return
	}
	time.Sleep(d)
	_ = p.Signal(syscall.SIGCONT)
}

// fresh reports whether e is recent enough for a fault aimed at the
// section it started: within a third of the hold time.
func fresh(e enter, hold time.Duration) bool { return time.Since(e.at) < hold/3 }

// run starts the workload's processes, lets inject act while they run
// (it must return when ctx ends or w.done closes), waits for them and
// checks the history.
func run(t *testing.T, wl workload, inject func(ctx context.Context, w *workers)) (Result, *workers) {
	t.Helper()
	bin := worker(t)
	var ip string
	if wl.net != nil {
		ip = wl.net.Gateway
	}
	res := startResource(t, wl.guard, ip)
	if wl.name == "" {
		wl.name = fmt.Sprintf("safety-%d", time.Now().UnixNano())
	}
	w := &workers{enters: make(chan enter, 64), done: make(chan struct{})}
	var readers sync.WaitGroup
	for i := range wl.clients {
		u := wl.url
		if i < len(wl.urls) && wl.urls[i] != "" {
			u = wl.urls[i]
		}
		hold := wl.hold
		if i < len(wl.holds) && wl.holds[i] != 0 {
			hold = wl.holds[i]
		}
		args := []string{"-url", u, "-name", wl.name, "-id", strconv.Itoa(i),
			"-dur", wl.dur.String(), "-ttl", wl.ttl.String(), "-hold", hold.String(),
			"-resource", res.url()}
		if wl.timeout != 0 {
			args = append(args, "-timeout", wl.timeout.String())
		}
		if wl.kind != "" && wl.kind != "mutex" {
			args = append(args, "-kind", wl.kind, "-limit", strconv.Itoa(max(wl.limit, 1)), "-resource", "")
		}
		cmd := exec.Command(bin, args...)
		if i < len(wl.hosts) && wl.hosts[i] != nil {
			cmd = wl.hosts[i].Command(bin, args...)
		}
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		w.cmds = append(w.cmds, cmd)
		readers.Go(func() {
			w.read(out)
			if err := cmd.Wait(); err != nil {
				w.mu.Lock()
				w.failed = append(w.failed, fmt.Sprintf("worker %d: %v: %s", i, err, stderr.String()))
				w.mu.Unlock()
			}
		})
	}
	ctx, cancel := context.WithCancel(context.Background())
	var injector sync.WaitGroup
	if inject != nil {
		injector.Go(func() { inject(ctx, w) })
	}
	readers.Wait()
	close(w.done)
	cancel()
	injector.Wait()
	for _, f := range w.failed {
		t.Error(f)
	}
	r := Check(w.acqs, res.writes())
	r.BadObservations, r.Abandoned = CheckObserved(w.acqs, w.calls, w.obs)
	if r.BadObservations != 0 {
		logObserved(t, w)
	}
	var lin porcupine.CheckResult
	switch wl.kind {
	case "", "mutex", "leader": // a lock with one holder
		lin = CheckLinear(w.acqs, res.writes(), time.Minute)
	case "permit":
		lin = CheckLinearPermits(w.acqs, max(wl.limit, 1), time.Minute)
	}
	switch lin {
	case porcupine.Illegal:
		r.NotLinearizable = 1
	case porcupine.Unknown:
		r.LinearUnknown = 1
	}
	if os.Getenv("DLOCK_SAFETY_DUMP") != "" {
		slices.SortFunc(w.acqs, func(a, b Acquisition) int { return cmp.Compare(a.Enter, b.Enter) })
		for _, a := range w.acqs {
			t.Logf("client %d token %d enter %d exit +%dms lost %v", a.Client, a.Token, a.Enter%1e11/1e6, (a.Exit-a.Enter)/1e6, a.Lost)
		}
		for _, e := range w.errs {
			t.Logf("error: %s", e)
		}
	}
	if r.Acquisitions == 0 {
		t.Errorf("no acquisition at all in the run (%d acquire errors, first: %v)", len(w.errs), first(w.errs))
	}
	if len(w.errs) > 0 {
		t.Logf("%d acquire errors, first: %s", len(w.errs), w.errs[0])
	}
	return r, w
}

// wantZero fails t, saying "n what", unless n is zero.
func wantZero(t *testing.T, n int, what string) {
	t.Helper()
	if n != 0 {
		t.Errorf("%d %s", n, what)
	}
}

// withParam adds the query parameter kv (name=value) to rawURL.
func withParam(rawURL, kv string) string {
	if strings.Contains(rawURL, "?") {
		return rawURL + "&" + kv
	}
	return rawURL + "?" + kv
}

func first(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return s[0]
}

// read parses a worker's output until it ends.
func (w *workers) read(out interface{ Read([]byte) (int, error) }) {
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		var e struct {
			Kind string `json:"k"`
			Acquisition
			At  int64  `json:"at"`
			Msg string `json:"msg"`
		}
		if json.Unmarshal(sc.Bytes(), &e) != nil {
			continue
		}
		switch e.Kind {
		case "enter":
			select {
			case w.enters <- enter{client: e.Client, token: e.Token, at: time.Unix(0, e.At)}:
			default:
			}
		case "acq":
			w.mu.Lock()
			w.acqs = append(w.acqs, e.Acquisition)
			w.mu.Unlock()
		case "obs":
			w.mu.Lock()
			w.obs = append(w.obs, Observation{Client: e.Client, Value: e.Msg, Token: e.Token, At: e.At})
			w.mu.Unlock()
		case "err":
			w.mu.Lock()
			w.errs = append(w.errs, fmt.Sprintf("client %d: called %d, failed %d: %s", e.Client, e.Call, e.At, e.Msg))
			w.calls = append(w.calls, Call{Client: e.Client, At: e.Call})
			w.mu.Unlock()
		}
	}
}

// logObserved logs, for a run whose observations CheckObserved found bad,
// every leader Observe showed, each client's granted campaigns and its
// failed ones, so that a failure says which observation it was.
func logObserved(t *testing.T, w *workers) {
	t.Helper()
	for _, a := range w.acqs {
		if a.Mode == "leader" {
			t.Logf("granted: client %d token %d enter %d exit %d lost %v", a.Client, a.Token, a.Enter, a.Exit, a.Lost)
		}
	}
	for _, o := range w.obs {
		t.Logf("observed: by client %d at %d leader %q token %d", o.Client, o.At, o.Value, o.Token)
	}
	for _, e := range w.errs {
		t.Logf("failed: %s", e)
	}
}
