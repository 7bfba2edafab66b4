package testenv

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"
)

// process is a server process a test starts, kills and starts again: a
// redis-server or sentinel, an etcd member, a nats-server, a ZooKeeper
// server, a private PostgreSQL or MariaDB: the command newCmd returns,
// ready when ready returns nil, within timeout of its start. Its output
// goes to the log file logPath, appended to across restarts; what names
// it in failures, which fail t.
type process struct {
	t       testing.TB
	what    string
	logPath string
	newCmd  func() *exec.Cmd
	ready   func() error
	timeout time.Duration

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has exited
}

// Start starts the process (again, unless it runs) and waits until it is
// ready.
func (p *process) Start() {
	p.t.Helper()
	p.launch()
	p.wait()
}

// launch starts the process unless it runs, without waiting.
func (p *process) launch() {
	p.t.Helper()
	if err := p.start(); err != nil {
		p.t.Fatal(err)
	}
}

// start runs newCmd's command unless the process runs already.
func (p *process) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return nil
	}
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("%s: log file: %w", p.what, err)
	}
	cmd := p.newCmd()
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s: %w", p.what, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(exited)
	}()
	p.cmd, p.exited = cmd, exited
	return nil
}

// Kill stops the process at once (SIGKILL), as a crash would; a process
// started in a group of its own is killed with its group.
func (p *process) Kill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return
	}
	if a := p.cmd.SysProcAttr; a != nil && a.Setpgid {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	}
	_ = p.cmd.Process.Kill()
	<-p.exited
	p.cmd, p.exited = nil, nil
}

// signal sends sig to the process, if it runs.
func (p *process) signal(sig os.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		_ = p.cmd.Process.Signal(sig)
	}
}

// Running reports whether the process runs.
func (p *process) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// exitedCh returns the channel closed when the process exits (nil when
// it was not started, or was killed).
func (p *process) exitedCh() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exited
}

// startAll starts the processes of servers together, kills them when t
// ends, and waits until each is ready.
func startAll[S any](t testing.TB, servers []S, proc func(S) *process) {
	t.Helper()
	t.Cleanup(func() {
		for _, s := range servers {
			proc(s).Kill()
		}
	})
	for _, s := range servers {
		proc(s).launch()
	}
	for _, s := range servers {
		proc(s).wait()
	}
}

// wait waits until the process is ready; it fails t, with the end of the
// log, when the process exits first or its timeout passes.
func (p *process) wait() {
	p.t.Helper()
	if err := poll(p.timeout, 50*time.Millisecond, p.exitedCh(), p.ready); err != nil {
		p.t.Fatalf("%s: %v\n%s", p.what, err, logTail(p.logPath))
	}
}

// poll calls ready, pausing between calls, until it returns nil; it
// returns ready's last error when exited is closed (nil: never) or
// timeout has passed.
func poll(timeout, pause time.Duration, exited <-chan struct{}, ready func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := ready()
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("exited at start-up: %w", err)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %v: %w", timeout, err)
		}
		time.Sleep(pause)
	}
}

// command returns bin with args, run on host h when it is not nil, with
// env added to its environment.
func command(h *Host, env []string, bin string, args ...string) *exec.Cmd {
	cmd := exec.Command(bin, args...)
	if h != nil {
		cmd = h.Command(bin, args...)
	}
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	return cmd
}

// logTail returns the end of a server's log file, for failure messages.
func logTail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// mapAddrs returns addr of each of xs.
func mapAddrs[T any](xs []T, addr func(T) string) []string {
	a := make([]string, len(xs))
	for i, x := range xs {
		a[i] = addr(x)
	}
	return a
}

// loopback reports whether host is a loopback address or localhost.
func loopback(host string) bool {
	ip := net.ParseIP(host)
	return host == "localhost" || ip != nil && ip.IsLoopback()
}

// must fails t with err unless err is nil.
func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// freePort returns a loopback port free now. A server that needs
// several ports takes them from one freePortsFor call: ports from
// separate calls may be the same.
func freePort(t testing.TB) int {
	t.Helper()
	return freePortsFor(t, 1)[0]
}

// freePortsFor returns n distinct loopback ports free now, or fails t.
func freePortsFor(t testing.TB, n int) []int {
	t.Helper()
	ports, err := freePorts(n)
	if err != nil {
		t.Fatal(err)
	}
	return ports
}

// freePorts returns n distinct loopback ports free now.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		defer l.Close() // held until all are chosen, so that they differ
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
