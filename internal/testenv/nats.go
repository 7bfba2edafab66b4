package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/dlockgo/dlock/internal/testenv/natsbin"
)

// NATSBinary returns the nats-server binary natsbin.Find chooses, looked
// up once per test binary. It fails t, naming ServicesScript, when there
// is none or it is too old.
func NATSBinary(t testing.TB) string {
	t.Helper()
	bin, err := findNATS()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

var findNATS = sync.OnceValues(func() (string, error) {
	bin, _, err := natsbin.Find()
	return bin, err
})

// NATSCluster is a set of nats-server processes with JetStream a test
// started on free loopback ports, each with a store directory of its own
// under the test's temporary directory: one server, or a cluster of
// several (routes between them all). Every server is killed when the test
// ends.
type NATSCluster struct {
	t       testing.TB
	o       NATSOptions
	Servers []*NATSServer
}

// NATSOptions configure StartNATSWith. The zero value is StartNATS's:
// plain connections, no authentication.
type NATSOptions struct {
	// TLS, when set, makes the servers accept TLS connections only, with
	// the PKI's server certificate, and verify client certificates
	// against its CA; Conn and the readiness check use the PKI's client
	// certificate.
	TLS *PKI
	// Authorization, when set, is the body of the servers'
	// authorization block (users and their permissions).
	Authorization string
	// Config, when set, is added to the servers' configuration as it
	// is: for settings no other field gives, such as operator mode's
	// operator, system_account and resolver.
	Config string
	// User and Password, Token, or Creds (a .creds file) are what Conn
	// and the readiness check authenticate with, for servers with
	// Authorization or Config.
	User, Password string
	Token          string
	Creds          string
}

// NATSServer is one process of a NATSCluster.
type NATSServer struct {
	// Name is the server's server_name: n0, n1, ...; stream and consumer
	// leaders are reported by it.
	Name string
	// Addr is the server's client address, host:port.
	Addr string
	process
}

// StartNATS starts n JetStream servers (a cluster of n when n > 1) and
// waits until JetStream answers on each. It fails t when the binary is
// missing or too old (see NATSBinary).
func StartNATS(t testing.TB, n int) *NATSCluster {
	t.Helper()
	return StartNATSWith(t, n, NATSOptions{})
}

// StartNATSWith is StartNATS with the options o.
func StartNATSWith(t testing.TB, n int, o NATSOptions) *NATSCluster {
	t.Helper()
	bin := NATSBinary(t)
	if n <= 0 {
		n = 1
	}
	dir := t.TempDir()
	c := &NATSCluster{t: t, o: o}
	routes := make([]string, n)
	ports := freePortsFor(t, 2*n) // n route ports, then n client ports
	clusterPorts := ports[:n]
	for i := range n {
		routes[i] = fmt.Sprintf("nats-route://127.0.0.1:%d", clusterPorts[i])
	}
	for i := range n {
		s := &NATSServer{Name: fmt.Sprintf("n%d", i), Addr: "127.0.0.1:" + strconv.Itoa(ports[n+i])}
		conf := filepath.Join(dir, s.Name+".conf")
		s.t, s.what, s.logPath, s.timeout = t, s.String(), filepath.Join(dir, s.Name+".log"), 30*time.Second
		s.newCmd = func() *exec.Cmd { return exec.Command(bin, "-c", conf) }
		// A client of this server alone gets JetStream's account
		// information (in a cluster, once a meta leader is elected).
		s.ready = func() error { return natsbin.Ready("nats://"+s.Addr, c.clientOptions(t)...) }
		var b strings.Builder
		fmt.Fprintf(&b, "server_name: %s\nlisten: %s\n", s.Name, s.Addr)
		fmt.Fprintf(&b, "jetstream {\n  store_dir: %q\n  max_memory_store: 256MB\n  max_file_store: 2GB\n}\n",
			filepath.Join(dir, s.Name))
		if p := o.TLS; p != nil {
			fmt.Fprintf(&b, "tls {\n  cert_file: %q\n  key_file: %q\n  ca_file: %q\n  verify: true\n}\n",
				p.ServerCert, p.ServerKey, p.CA)
		}
		if o.Authorization != "" {
			fmt.Fprintf(&b, "authorization {\n%s\n}\n", o.Authorization)
		}
		if o.Config != "" {
			fmt.Fprintf(&b, "%s\n", o.Config)
		}
		if n > 1 {
			fmt.Fprintf(&b, "cluster {\n  name: dlock-test\n  listen: 127.0.0.1:%d\n  routes: [%s]\n}\n",
				clusterPorts[i], strings.Join(routes, ", "))
		}
		if err := os.WriteFile(conf, []byte(b.String()), 0o644); err != nil {
			t.Fatalf("nats-server %s: config: %v", s.Name, err)
		}
		c.Servers = append(c.Servers, s)
	}
	startAll(t, c.Servers, func(s *NATSServer) *process { return &s.process })
	if n > 1 {
		c.waitPlacement(30 * time.Second)
	}
	return c
}

// waitPlacement waits until the cluster places a stream on all its
// servers: a meta leader answers JetStream's account information before
// it has heard from every peer, and until then a replicated bucket is
// refused ("no suitable peers for placement").
func (c *NATSCluster) waitPlacement(timeout time.Duration) {
	c.t.Helper()
	js, err := jetstream.New(c.Conn(c.t))
	if err != nil {
		c.t.Fatal(err)
	}
	cfg := jetstream.StreamConfig{Name: "testenv-ready", Subjects: []string{"testenv.ready"},
		Storage: jetstream.MemoryStorage, Replicas: len(c.Servers)}
	err = poll(timeout, 100*time.Millisecond, nil, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := js.CreateStream(ctx, cfg)
		if err == nil {
			err = js.DeleteStream(ctx, cfg.Name)
		}
		return err
	})
	if err != nil {
		c.t.Fatalf("nats cluster %s: a stream of %d replicas not placed: %v", c.URL(), len(c.Servers), err)
	}
}

// URL returns the servers' addresses as a nats:// URL's host list
// ("127.0.0.1:p1,127.0.0.1:p2").
func (c *NATSCluster) URL() string {
	return strings.Join(mapAddrs(c.Servers, func(s *NATSServer) string { return s.Addr }), ",")
}

// ServerURLs returns the servers' addresses as nats.Connect takes them.
func (c *NATSCluster) ServerURLs() string {
	return strings.Join(mapAddrs(c.Servers, func(s *NATSServer) string { return "nats://" + s.Addr }), ",")
}

// Conn returns a connection to the servers that reconnects for ever and
// buffers nothing while it does (as natslock's URLs' connections), closed
// when the test ends.
func (c *NATSCluster) Conn(t testing.TB) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(c.ServerURLs(), append(c.clientOptions(t), nats.MaxReconnects(-1), nats.ReconnectBufSize(-1),
		nats.ReconnectWait(100*time.Millisecond), nats.Timeout(2*time.Second))...)
	if err != nil {
		t.Fatalf("connect to nats-server %s: %v", c.URL(), err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// clientOptions are the credentials and TLS of the cluster's admin.
func (c *NATSCluster) clientOptions(t testing.TB) []nats.Option {
	var opts []nats.Option
	if c.o.User != "" {
		opts = append(opts, nats.UserInfo(c.o.User, c.o.Password))
	}
	if c.o.Token != "" {
		opts = append(opts, nats.Token(c.o.Token))
	}
	if c.o.Creds != "" {
		opts = append(opts, nats.UserCredentials(c.o.Creds))
	}
	if c.o.TLS != nil {
		opts = append(opts, nats.Secure(c.o.TLS.ClientTLS(t)))
	}
	return opts
}

// StreamLeader returns the server that leads stream now, asking the
// cluster through conn; nil when none is known.
func (c *NATSCluster) StreamLeader(ctx context.Context, js jetstream.JetStream, stream string) *NATSServer {
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return nil
	}
	info, err := s.Info(ctx)
	if err != nil || info.Cluster == nil {
		return nil
	}
	for _, srv := range c.Servers {
		if srv.Name == info.Cluster.Leader {
			return srv
		}
	}
	return nil
}

// String describes the server for test logs.
func (s *NATSServer) String() string { return "nats-server " + s.Name + " " + s.Addr }
