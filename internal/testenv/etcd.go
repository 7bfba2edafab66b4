package testenv

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// EtcdScript installs etcd (and starts shared servers for manual runs).
const EtcdScript = "scripts/etcd.sh"

// EtcdOptions configure StartEtcd. The zero value starts one member with
// fast test timings.
type EtcdOptions struct {
	// Members is the cluster's size; 1 when zero. Its Raft timings
	// (heartbeat, election) are 10ms and 100ms for one member, 50ms and
	// 500ms for a cluster, which rides out a busy 2-core machine without
	// spurious elections; etcd's smallest lease TTL is 1.5 × the election
	// timeout, rounded up to whole seconds.
	Members             int
	heartbeat, election time.Duration
	// TLS, when set, makes the members serve clients over TLS only, with
	// the PKI's server certificate, and require a client certificate its
	// CA signed (--client-cert-auth); Client and the health checks use
	// the PKI's client certificate.
	TLS *PKI
	// Hosts, when set, places member i on Hosts[i] (a test network's
	// host, StartNet): it listens on the host's address and runs in its
	// namespace, so that partitions between hosts cut its links.
	Hosts []*Host
}

// EtcdCluster is a set of etcd processes a test started on free loopback
// ports, with data in a directory of its own. Every member is killed and
// the data removed when the test ends.
type EtcdCluster struct {
	t       testing.TB
	token   string
	initial string // --initial-cluster
	o       EtcdOptions
	// Members are the cluster's members, in the order they were started.
	Members []*EtcdMember
}

// EtcdMember is one process of an EtcdCluster.
type EtcdMember struct {
	c *EtcdCluster
	// Name is the member's etcd name: m0, m1, ...
	Name string
	// Endpoint is the member's client address, host:port.
	Endpoint string
	peerURL  string
	// Host is the test host the member runs on (EtcdOptions.Hosts), or nil.
	Host    *Host
	dataDir string
	process
}

// EtcdBinary returns the etcd server binary: DLOCK_ETCD_BIN, else etcd on
// PATH. It fails t, naming EtcdScript, when there is none.
func EtcdBinary(t testing.TB) string {
	t.Helper()
	bin, err := exec.LookPath(Getenv("DLOCK_ETCD_BIN", "etcd"))
	if err != nil {
		t.Fatalf("the etcd server binary is not installed (%v); install it with %s install (or set DLOCK_ETCD_BIN)", err, EtcdScript)
	}
	return bin
}

// EtcdEndpoints returns the endpoints of an etcd for tests that need just
// one server: those in DLOCK_ETCD_ENDPOINTS (comma-separated, loopback
// only; for example the one `scripts/etcd.sh start` runs on
// 127.0.0.1:23790), after checking that they answer; otherwise a
// single-member cluster of the test's own.
func EtcdEndpoints(t testing.TB) []string {
	t.Helper()
	env := os.Getenv("DLOCK_ETCD_ENDPOINTS")
	if env == "" {
		return StartEtcd(t, EtcdOptions{}).Endpoints()
	}
	eps := strings.Split(env, ",")
	for _, ep := range eps {
		host, _, err := net.SplitHostPort(ep)
		if err != nil || !loopback(host) {
			t.Fatalf("DLOCK_ETCD_ENDPOINTS: %q is not a loopback host:port", ep)
		}
		if err := etcdHealthy("http://"+ep, nil, 2*time.Second); err != nil {
			t.Fatalf("etcd at %s (DLOCK_ETCD_ENDPOINTS) does not answer: %v; start it with %s start", ep, err, EtcdScript)
		}
	}
	return eps
}

// StartEtcd starts an etcd cluster of the test's own and waits until it
// has a leader. It fails t when the etcd binary is missing.
func StartEtcd(t testing.TB, o EtcdOptions) *EtcdCluster {
	t.Helper()
	bin := EtcdBinary(t)
	if o.Members <= 0 {
		o.Members = 1
	}
	o.heartbeat, o.election = 10*time.Millisecond, 100*time.Millisecond
	if o.Members > 1 {
		o.heartbeat, o.election = 50*time.Millisecond, 500*time.Millisecond
	}
	dir := dataRoot(t)
	c := &EtcdCluster{t: t, o: o, token: "dlock-" + strconv.FormatInt(time.Now().UnixNano(), 36)}
	var initial []string
	if len(o.Hosts) != 0 && len(o.Hosts) != o.Members {
		t.Fatalf("StartEtcd: %d hosts for %d members", len(o.Hosts), o.Members)
	}
	ports := freePortsFor(t, 2*o.Members) // a client and a peer port each
	for i := range o.Members {
		h := hostAt(o.Hosts, i)
		m := &EtcdMember{
			c:        c,
			Name:     fmt.Sprintf("m%d", i),
			Endpoint: h.ip() + ":" + strconv.Itoa(ports[2*i]),
			peerURL:  "http://" + h.ip() + ":" + strconv.Itoa(ports[2*i+1]),
			Host:     h,
		}
		m.dataDir = dir + "/" + m.Name
		m.t, m.what, m.logPath, m.timeout = t, m.String(), m.dataDir+".log", 30*time.Second
		m.newCmd = func() *exec.Cmd { return command(m.Host, nil, bin, m.args()...) }
		m.ready = func() error { return c.healthy(m.Endpoint, time.Second) } // /health: a leader is known
		initial = append(initial, m.Name+"="+m.peerURL)
		c.Members = append(c.Members, m)
	}
	c.initial = strings.Join(initial, ",")
	startAll(t, c.Members, func(m *EtcdMember) *process { return &m.process })
	return c
}

// dataRoot returns a fresh directory for the cluster's data, on tmpfs
// when the machine has one: etcd syncs its log on every write, which
// tmpfs makes free (etcd 3.4 has no --unsafe-no-fsync).
func dataRoot(t testing.TB) string {
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		if dir, err := os.MkdirTemp("/dev/shm", "dlock-etcd-"); err == nil {
			t.Cleanup(func() { _ = os.RemoveAll(dir) })
			return dir
		}
	}
	return t.TempDir()
}

// Endpoints returns the members' client addresses.
func (c *EtcdCluster) Endpoints() []string {
	return mapAddrs(c.Members, func(m *EtcdMember) string { return m.Endpoint })
}

// Client returns a client of every member, closed when the test ends.
func (c *EtcdCluster) Client() *clientv3.Client { return c.ClientAs("", "") }

// ClientAs returns a client of every member that authenticates as user
// with password (none when user is empty), over TLS with the PKI's client
// certificate if the cluster has one; closed when the test ends.
func (c *EtcdCluster) ClientAs(user, password string) *clientv3.Client {
	c.t.Helper()
	cfg := clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		Username: user, Password: password}
	if c.o.TLS != nil {
		cfg.TLS = c.o.TLS.ClientTLS(c.t)
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		c.t.Fatalf("etcd client of %v as %q: %v", cfg.Endpoints, user, err)
	}
	c.t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// EnableAuth turns on etcd's authentication: the user root (role root)
// with rootPassword, and a user of each of users allowed to read and
// write the keys under its prefix only. It returns a client of root.
func (c *EtcdCluster) EnableAuth(rootPassword string, users ...EtcdUser) *clientv3.Client {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cli := c.Client()
	// step takes a call's answer and error, failing the test on an error.
	step := func(_ any, err error) {
		c.t.Helper()
		if err != nil {
			c.t.Fatalf("etcd auth set-up: %v", err)
		}
	}
	step(cli.UserAdd(ctx, "root", rootPassword))
	step(cli.UserGrantRole(ctx, "root", "root"))
	for _, u := range users {
		step(cli.RoleAdd(ctx, u.Name))
		step(cli.RoleGrantPermission(ctx, u.Name, u.Prefix, clientv3.GetPrefixRangeEnd(u.Prefix),
			clientv3.PermissionType(clientv3.PermReadWrite)))
		step(cli.UserAdd(ctx, u.Name, u.Password))
		step(cli.UserGrantRole(ctx, u.Name, u.Name))
	}
	step(cli.AuthEnable(ctx))
	return c.ClientAs("root", rootPassword)
}

// EtcdUser is a user EnableAuth creates.
type EtcdUser struct {
	Name, Password string
	// Prefix is the only key range the user may read and write.
	Prefix string
}

// EtcdClient returns a client of endpoints that logs nothing, closed when
// the test ends.
func EtcdClient(t testing.TB, endpoints []string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatalf("etcd client of %v: %v", endpoints, err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// Leader returns the member that is leader now, asking the running
// members through the maintenance Status call; nil when none knows one.
func (c *EtcdCluster) Leader(ctx context.Context) *EtcdMember {
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil
	}
	defer cli.Close()
	for _, m := range c.Members {
		if !m.Running() {
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		st, err := cli.Status(sctx, m.Endpoint)
		cancel()
		if err != nil || st.Leader == 0 {
			continue
		}
		if st.Header.MemberId == st.Leader {
			return m
		}
	}
	return nil
}

// WaitLeader waits up to timeout for a leader among the running members
// and returns it; it fails the test when there is none.
func (c *EtcdCluster) WaitLeader(timeout time.Duration) *EtcdMember {
	c.t.Helper()
	var m *EtcdMember
	err := poll(timeout, 20*time.Millisecond, nil, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		if m = c.Leader(ctx); m == nil {
			return errors.New("no leader")
		}
		return nil
	})
	if err != nil {
		c.t.Fatalf("etcd cluster: %v", err)
	}
	return m
}

func (m *EtcdMember) args() []string {
	args := []string{
		"--name", m.Name,
		"--data-dir", m.dataDir,
		"--listen-client-urls", m.c.scheme() + "://" + m.Endpoint,
		"--advertise-client-urls", m.c.scheme() + "://" + m.Endpoint,
		"--listen-peer-urls", m.peerURL,
		"--initial-advertise-peer-urls", m.peerURL,
		"--initial-cluster", m.c.initial,
		"--initial-cluster-state", "new",
		"--initial-cluster-token", m.c.token,
		"--heartbeat-interval", strconv.FormatInt(m.c.o.heartbeat.Milliseconds(), 10),
		"--election-timeout", strconv.FormatInt(m.c.o.election.Milliseconds(), 10),
		"--logger", "zap", "--log-outputs", "stderr", "--log-level", "warn",
	}
	if p := m.c.o.TLS; p != nil {
		args = append(args, "--cert-file", p.ServerCert, "--key-file", p.ServerKey,
			"--trusted-ca-file", p.CA, "--client-cert-auth")
	}
	// With authentication on (EnableAuth), every client's Authenticate
	// checks a bcrypt hash: at the default cost that is tens of ms of the
	// member's CPU per client, which on a small machine delays keep-alives
	// of 1s leases. The lowest cost keeps the check and drops the load.
	args = append(args, "--bcrypt-cost", "4")
	return args
}

// scheme is the client URLs' scheme: https with TLS.
func (c *EtcdCluster) scheme() string {
	if c.o.TLS != nil {
		return "https"
	}
	return "http"
}

// etcdHealthy asks the /health endpoint at base (http://host:port),
// which reports true once the member has a leader; tlsConf is for https.
func etcdHealthy(base string, tlsConf *tls.Config, timeout time.Duration) error {
	hc := http.Client{Timeout: timeout}
	if tlsConf != nil {
		hc.Transport = &http.Transport{TLSClientConfig: tlsConf}
	}
	resp, err := hc.Get(base + "/health")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"true"`) {
		return fmt.Errorf("health: %s %s", resp.Status, b)
	}
	return nil
}

// healthy asks the member at endpoint whether it has a leader.
func (c *EtcdCluster) healthy(endpoint string, timeout time.Duration) error {
	var tlsConf *tls.Config
	if c.o.TLS != nil {
		tlsConf = c.o.TLS.ClientTLS(c.t)
	}
	return etcdHealthy(c.scheme()+"://"+endpoint, tlsConf, timeout)
}

// String describes the member for test logs.
func (m *EtcdMember) String() string { return "etcd " + m.Name + " " + m.Endpoint }

// EtcdctlBinary returns etcdctl, etcd's command-line client (Debian's
// etcd-client), from PATH. It fails t, naming ServicesScript, when there
// is none: the interoperability tests need the real peer, on CI as
// anywhere.
func EtcdctlBinary(t testing.TB) string {
	t.Helper()
	bin, err := exec.LookPath("etcdctl")
	if err != nil {
		t.Fatalf("etcdctl is not installed (%v); install it (etcd-client) with %s", err, ServicesScript)
	}
	return bin
}

// Etcdctl returns an unstarted etcdctl with args, speaking the v3 API to
// endpoints, in a process group of its own so that a test can kill it
// with whatever it runs (etcdctl lock NAME -- cmd). Whatever is left of
// the group when the test ends is killed; the caller waits for the
// process.
func Etcdctl(t testing.TB, endpoints []string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(EtcdctlBinary(t), append([]string{"--endpoints=" + strings.Join(endpoints, ",")}, args...)...)
	cmd.Env = append(os.Environ(), "ETCDCTL_API=3")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	t.Cleanup(func() {
		if cmd.Process != nil {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
	})
	return cmd
}
