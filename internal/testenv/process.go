package testenv

import (
	"os"
	"os/exec"
	"sync"
	"testing"
)

// process is a server process a test starts, kills and starts again: an
// etcd member, a nats-server. Its output goes to a log file, appended to
// across restarts.
type process struct {
	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has exited
}

// start runs the command newCmd returns, unless the process runs
// already, with its output appended to logPath; what names it in
// failures.
func (p *process) start(t testing.TB, what, logPath string, newCmd func() *exec.Cmd) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return
	}
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatalf("%s: log file: %v", what, err)
	}
	cmd := newCmd()
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		t.Fatalf("start %s: %v", what, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(exited)
	}()
	p.cmd, p.exited = cmd, exited
}

// Kill stops the process at once (SIGKILL), as a crash would.
func (p *process) Kill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Kill()
	<-p.exited
	p.cmd = nil
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

// exitedCh returns the channel closed when the process started last
// exits (nil before a start).
func (p *process) exitedCh() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exited
}
