package harness

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// A Server is a server process the benchmark started on a free loopback
// port, with a temporary directory of its own: a redis-server without
// persistence (StartServers) or a nats-server with JetStream (StartNATS).
type Server struct {
	Addr string
	dir  string
	cmd  *exec.Cmd
}

// StartServers starts n redis-server processes on free loopback ports with
// persistence off (--save "" --appendonly no) and waits until each answers.
// On error, the ones already started are killed.
func StartServers(n int) ([]*Server, error) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		return nil, fmt.Errorf("redis-server not found: %w", err)
	}
	var out []*Server
	for range n {
		s, err := startServer()
		if err != nil {
			KillServers(out)
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

func startServer() (*Server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	return launch("redis-server", addr, ping, func(dir string) *exec.Cmd {
		return exec.Command("redis-server",
			"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir,
			"--save", "", "--appendonly", "no", "--daemonize", "no", "--loglevel", "warning")
	})
}

// launch starts the server command makes, given a new temporary directory
// of its own, and waits (up to 10 s) until ready(addr) succeeds. The
// server's output goes to a file there, whose end an error quotes.
func launch(name, addr string, ready func(addr string) error, command func(dir string) *exec.Cmd) (*Server, error) {
	dir, err := os.MkdirTemp("", "dlockbench-"+name+"-")
	if err != nil {
		return nil, err
	}
	s := &Server{Addr: addr, dir: dir}
	logPath := filepath.Join(dir, "server.log")
	out, err := os.Create(logPath)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	defer out.Close() // the child has its own descriptor
	s.cmd = command(dir)
	s.cmd.Stdout, s.cmd.Stderr = out, out
	// If the benchmark process dies without cleaning up, the kernel kills
	// the server too.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := ready(s.Addr)
		if err == nil {
			return s, nil
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(logPath)
			s.Kill()
			return nil, fmt.Errorf("%s on %s did not answer: %w\n%s", name, s.Addr, err, tail(log, 2000))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// tail returns the last n bytes of b, as text.
func tail(b []byte, n int) string {
	return strings.TrimSpace(string(b[max(len(b)-n, 0):]))
}

// Kill stops the server (SIGKILL) and removes its directory.
func (s *Server) Kill() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
		s.cmd = nil
	}
	_ = os.RemoveAll(s.dir)
}

// Pid returns the server's process id (0 once killed).
func (s *Server) Pid() int {
	if s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// ServerCPU returns the CPU time (user+system, all threads) the Redis
// servers at addrs used so far, from INFO cpu.
func ServerCPU(ctx context.Context, addrs []string) (time.Duration, error) {
	var total time.Duration
	err := eachNode(addrs, func(c *redis.Client) error {
		info, err := c.Info(ctx, "cpu").Result()
		if err != nil {
			return err
		}
		for _, l := range strings.Split(info, "\n") {
			k, v, ok := strings.Cut(strings.TrimSpace(l), ":")
			if !ok || (k != "used_cpu_sys" && k != "used_cpu_user") {
				continue
			}
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return fmt.Errorf("INFO cpu %s: %w", k, err)
			}
			total += time.Duration(f * float64(time.Second))
		}
		return nil
	})
	return total, err
}

// eachNode calls f with a client of each Redis server at addrs in turn,
// closed after the call, until f fails.
func eachNode(addrs []string, f func(*redis.Client) error) error {
	for _, a := range addrs {
		c := NewClient(a)
		err := f(c)
		_ = c.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// KillServers kills every server in ss.
func KillServers(ss []*Server) {
	for _, s := range ss {
		s.Kill()
	}
}

// Addrs returns the servers' addresses.
func Addrs(ss []*Server) []string {
	a := make([]string, len(ss))
	for i, s := range ss {
		a[i] = s.Addr
	}
	return a
}

func ping(addr string) error {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return c.Ping(ctx).Err()
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Loopback returns an error unless addr (host:port) is on loopback: the
// commands run against this machine's servers only.
func Loopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("-redis %q: %w", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("-redis %q: only loopback addresses are allowed", addr)
	}
	return nil
}
