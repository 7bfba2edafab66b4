// Package testenv finds and starts the real servers dlock's tests run
// against. Addresses come from environment variables with loopback
// defaults. A server that is needed but missing fails the test, with a
// message naming the script that starts it: it is never skipped, so a
// green run always means the backend was really tested.
package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// ServicesScript starts every server the tests need.
const ServicesScript = "scripts/services.sh"

// RedisAddr returns the address of the shared Redis server
// (DLOCK_REDIS_ADDR, default 127.0.0.1:6379) after checking that it
// answers; it fails t otherwise.
func RedisAddr(t testing.TB) string {
	t.Helper()
	addr := Getenv("DLOCK_REDIS_ADDR", "127.0.0.1:6379")
	if err := pingRedis(addr); err != nil {
		t.Fatalf("Redis at %s (DLOCK_REDIS_ADDR) does not answer: %v; start it with %s", addr, err, ServicesScript)
	}
	return addr
}

// RedisClient returns a client of the shared Redis server, closed when t ends.
func RedisClient(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: RedisAddr(t)})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Getenv returns the environment variable key, or def when it is unset.
func Getenv(key, def string) string {
	if v, ok := os.LookupEnv(key); ok && v != "" {
		return v
	}
	return def
}

func pingRedis(addr string) error { return pingRedisWith(&redis.Options{Addr: addr}) }

// pingRedisWith pings the server o names, with o's credentials and TLS.
func pingRedisWith(o *redis.Options) error {
	o.MaxRetries, o.DialTimeout = -1, time.Second
	c := redis.NewClient(o)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return c.Ping(ctx).Err()
}

// RedisServer is a redis-server process a test started on a free loopback
// port. It is stopped when the test ends.
type RedisServer struct {
	Addr     string
	port     int
	dir      string
	persist  bool
	args     []string
	password string
	tls      *PKI
	env      []string
	// Host is the test host the server runs on (RedisOptions.Host), or nil.
	Host *Host
	process
}

// ip is the address the server listens on.
func (s *RedisServer) ip() string {
	if s.Host != nil {
		return s.Host.IP
	}
	return "127.0.0.1"
}

// RedisOptions configure StartRedis.
type RedisOptions struct {
	// Persist turns on the append-only file, so that a restart keeps data.
	// By default the server keeps nothing on disk, like the machine's Redis.
	Persist bool
	// Args are more redis-server arguments, given on every start (as
	// "--replicaof", "127.0.0.1", "6380").
	Args []string
	// Password is what the server requires (when Args set requirepass),
	// for the readiness check and Client.
	Password string
	// TLS, when set, makes the server listen on TLS only, with the PKI's
	// server certificate, and require a client certificate its CA signed
	// (tls-auth-clients yes); the readiness check and Client use the
	// PKI's client certificate.
	TLS *PKI
	// Host, when set, runs the server on a test network's host (StartNet),
	// listening on the host's address.
	Host *Host
	// Env is added to the server's environment (as "LD_PRELOAD=…").
	Env []string
}

// StartRedis starts a redis-server of the test's own on a free loopback
// port. It fails t when the redis-server binary is missing.
func StartRedis(t testing.TB, o RedisOptions) *RedisServer {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("redis-server not found (%v); install it with %s", err, ServicesScript)
	}
	s := &RedisServer{port: freePort(t), dir: t.TempDir(), persist: o.Persist, args: o.Args, password: o.Password, tls: o.TLS, Host: o.Host, env: o.Env}
	s.Addr = s.ip() + ":" + strconv.Itoa(s.port)
	s.t, s.what, s.logPath, s.newCmd, s.timeout = t, s.String(), filepath.Join(s.dir, "redis.log"), s.command, 10*time.Second
	s.ready = func() error { return pingRedisWith(s.options()) }
	t.Cleanup(s.Kill)
	s.Start()
	return s
}

// command is the server's redis-server command.
func (s *RedisServer) command() *exec.Cmd {
	args := []string{"--port", strconv.Itoa(s.port), "--bind", s.ip(), "--dir", s.dir,
		"--save", "", "--daemonize", "no", "--loglevel", "warning"}
	if s.Host != nil {
		// Clients come from other hosts' addresses, which protected mode
		// refuses without a password.
		args = append(args, "--protected-mode", "no")
	}
	if p := s.tls; p != nil {
		args[1] = "0"
		args = append(args, "--tls-port", strconv.Itoa(s.port), "--tls-cert-file", p.ServerCert,
			"--tls-key-file", p.ServerKey, "--tls-ca-cert-file", p.CA, "--tls-auth-clients", "yes")
	}
	if s.persist {
		args = append(args, "--appendonly", "yes", "--appendfsync", "always")
	} else {
		args = append(args, "--appendonly", "no")
	}
	return command(s.Host, s.env, "redis-server", append(args, s.args...)...)
}

// options are the client options of the server's admin: its password, and
// the PKI's client certificate over TLS.
func (s *RedisServer) options() *redis.Options {
	o := &redis.Options{Addr: s.Addr, Password: s.password}
	if s.tls != nil {
		o.TLSConfig = s.tls.ClientTLS(s.t)
	}
	return o
}

// Restart kills the server and starts it again on the same port.
func (s *RedisServer) Restart() {
	s.Kill()
	s.Start()
}

// Client returns a client of this server, closed when the test ends.
func (s *RedisServer) Client() *redis.Client {
	c := redis.NewClient(s.options())
	s.t.Cleanup(func() { _ = c.Close() })
	return c
}

// StartRedisN starts n servers; see StartRedis.
func StartRedisN(t testing.TB, n int, o RedisOptions) []*RedisServer {
	t.Helper()
	s := make([]*RedisServer, n)
	for i := range s {
		s[i] = StartRedis(t, o)
	}
	return s
}

// Addrs returns the servers' addresses joined by commas, as redlock URLs
// take them.
func Addrs(servers []*RedisServer) string {
	return strings.Join(mapAddrs(servers, func(s *RedisServer) string { return s.Addr }), ",")
}

// String describes the server for test logs.
func (s *RedisServer) String() string { return fmt.Sprintf("redis-server %s", s.Addr) }
