package harness

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// A Server is a redis-server process the benchmark started on a free
// loopback port, without persistence. Kill stops it.
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
	dir, err := os.MkdirTemp("", "dlockbench-redis-")
	if err != nil {
		return nil, err
	}
	s := &Server{Addr: "127.0.0.1:" + strconv.Itoa(port), dir: dir}
	s.cmd = exec.Command("redis-server",
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir,
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--loglevel", "warning")
	// If the benchmark process dies without cleaning up, the kernel kills
	// the server too.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start redis-server: %w", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := ping(s.Addr)
		if err == nil {
			return s, nil
		}
		if time.Now().After(deadline) {
			s.Kill()
			return nil, fmt.Errorf("redis-server on %s did not answer: %w", s.Addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
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
	for _, a := range addrs {
		c := NewClient(a)
		info, err := c.Info(ctx, "cpu").Result()
		_ = c.Close()
		if err != nil {
			return 0, err
		}
		for _, l := range strings.Split(info, "\n") {
			k, v, ok := strings.Cut(strings.TrimSpace(l), ":")
			if !ok || (k != "used_cpu_sys" && k != "used_cpu_user") {
				continue
			}
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return 0, fmt.Errorf("INFO cpu %s: %w", k, err)
			}
			total += time.Duration(f * float64(time.Second))
		}
	}
	return total, nil
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
