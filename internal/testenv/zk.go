package testenv

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// ZooKeeperScript installs ZooKeeper and starts the project's servers.
const ZooKeeperScript = "scripts/zookeeper.sh"

// ZooKeeper defaults: the ports scripts/zookeeper.sh uses. Tests that find
// nothing there start servers of their own.
const (
	DefaultZKAddr     = "127.0.0.1:21810"
	DefaultZKEnsemble = "127.0.0.1:21811,127.0.0.1:21812,127.0.0.1:21813"
)

// ZKTickTime is the tickTime of every server the project starts. The
// server bounds session timeouts to 2 to 20 ticks unless configured
// otherwise (the project's servers allow up to 60s), so a small tick lets
// tests use sessions of a second or two.
const ZKTickTime = 200 * time.Millisecond

// zkShared are the shared servers this test binary started, by size.
var zkShared = struct {
	sync.Mutex
	clusters map[int]*ZKCluster
}{clusters: map[int]*ZKCluster{}}

// ZKAddr returns the address of the shared standalone ZooKeeper server:
// DLOCK_ZK_ADDR if set (it must answer), else DefaultZKAddr if a server
// answers there, else a server this test binary starts on a free port and
// stops in StopSharedZK. It fails t when none can be had, naming the script
// that installs ZooKeeper: a test never skips for want of a server.
func ZKAddr(t testing.TB) string {
	t.Helper()
	return sharedZK(t, "DLOCK_ZK_ADDR", DefaultZKAddr, 1)[0]
}

// ZKEnsembleAddrs returns the client addresses of the shared 3-node
// ensemble: DLOCK_ZK_ENSEMBLE (comma-separated) if set, else
// DefaultZKEnsemble if it answers, else an ensemble this test binary starts.
// Tests must not stop its nodes; start a private one with StartZK for that.
func ZKEnsembleAddrs(t testing.TB) []string {
	t.Helper()
	return sharedZK(t, "DLOCK_ZK_ENSEMBLE", DefaultZKEnsemble, 3)
}

func sharedZK(t testing.TB, env, def string, n int) []string {
	t.Helper()
	if v, ok := os.LookupEnv(env); ok && v != "" {
		addrs := strings.Split(v, ",")
		for _, a := range addrs {
			if host, _, err := net.SplitHostPort(a); err != nil || !loopback(host) {
				t.Fatalf("%s=%s: tests use loopback addresses only (host:port)", env, v)
			}
		}
		if err := zkServing(addrs); err != nil {
			t.Fatalf("ZooKeeper at %s (%s) does not serve: %v; start it with %s", v, env, err, ZooKeeperScript)
		}
		return addrs
	}
	addrs := strings.Split(def, ",")
	if zkServing(addrs) == nil {
		return addrs
	}
	zkShared.Lock()
	defer zkShared.Unlock()
	c := zkShared.clusters[n]
	if c == nil {
		dir, err := os.MkdirTemp("", "dlock-zk-")
		if err != nil {
			t.Fatalf("ZooKeeper: %v", err)
		}
		c, err = launchZK(dir, n, ZKOptions{})
		if err != nil {
			_ = os.RemoveAll(dir)
			t.Fatalf("no ZooKeeper at %s (%s unset) and starting one failed: %v; install and start it with %s", def, env, err, ZooKeeperScript)
		}
		c.ownDir = true
		zkShared.clusters[n] = c
		t.Logf("no ZooKeeper at %s: started %d server(s) of this test binary at %s", def, n, strings.Join(c.Addrs(), ","))
	}
	return c.Addrs()
}

// StopSharedZK stops the shared servers this test binary started, if any.
// A package whose tests use ZKAddr or ZKEnsembleAddrs calls it from
// TestMain after m.Run.
func StopSharedZK() {
	zkShared.Lock()
	defer zkShared.Unlock()
	for _, c := range zkShared.clusters {
		c.Stop()
	}
	clear(zkShared.clusters)
}

// ZKCluster is a set of ZooKeeper server processes a test started on free
// loopback ports: one standalone server, or an ensemble.
type ZKCluster struct {
	Servers []*ZKServer
	dir     string
	ownDir  bool
}

// ZKServer is one ZooKeeper server process of a ZKCluster.
type ZKServer struct {
	// ID is the server's myid (1-based).
	ID int
	// Addr is its client address.
	Addr string
	// SecureAddr is its TLS client address, with ZKOptions.TLS.
	SecureAddr string
	// Host is the test host the server runs on (ZKOptions.Hosts), or nil.
	Host *Host
	env  []string
	cfg  string
	process
}

// StartZK starts n ZooKeeper servers (1: standalone; 3: an ensemble) of
// the test's own on free loopback ports, with data in t.TempDir(), and
// waits until they serve. They are stopped when the test ends. It fails t
// when ZooKeeper is not installed.
func StartZK(t testing.TB, n int) *ZKCluster {
	t.Helper()
	return StartZKWith(t, n, ZKOptions{})
}

// ZKOptions configure the servers StartZKWith starts. The zero value
// means the project's settings (zkConfig).
type ZKOptions struct {
	// Tick is the servers' tickTime; default ZKTickTime.
	Tick time.Duration
	// SyncLimit is how many ticks a follower may lag behind its leader, or
	// go without hearing from it, before it gives up; default 5.
	SyncLimit int
	// Peer, if set, returns the address server from dials to reach server
	// to's quorum port (election false) or election port, whose real
	// address is addr: a test puts a proxy there to cut the link. Each
	// server listens on its own real addresses. (ZooKeeper opens some
	// election links back to the address a peer advertises, its real one:
	// those bypass Peer. The quorum links, a follower's connection to its
	// leader, always use it.)
	Peer func(from, to int, election bool, addr string) (string, error)
	// TLS, when set, gives each server a secure client port too (Netty,
	// the PKI's server certificate, client certificates required), at
	// ZKServer.SecureAddr; the plain port stays for the readiness checks.
	TLS *PKI
	// Hosts, when set, places server i (1-based ID i) on Hosts[i-1] (a
	// test network's host, StartNet): it listens on the host's address
	// and runs in its namespace, so that partitions between hosts cut its
	// links.
	Hosts []*Host
	// Env, when set, returns what is added to server id's environment
	// (as a FakeClock's Env).
	Env func(id int) []string
}

// StartZKWith is StartZK with options.
func StartZKWith(t testing.TB, n int, o ZKOptions) *ZKCluster {
	t.Helper()
	c, err := launchZK(t.TempDir(), n, o)
	// The ports are free when chosen, but another process may take one
	// before the JVM binds it: choose again.
	for try := 1; try < 3 && err != nil && strings.Contains(err.Error(), "Address already in use"); try++ {
		c, err = launchZK(t.TempDir(), n, o)
	}
	if err != nil {
		t.Fatalf("start ZooKeeper: %v; install it with %s", err, ZooKeeperScript)
	}
	t.Cleanup(c.Stop)
	return c
}

// ZKClasspath returns the Java classpath of the installed ZooKeeper server:
// DLOCK_ZK_CLASSPATH if set, else the Debian package's jar (whose manifest
// names its dependencies), with slf4j-simple for logs when present.
func ZKClasspath() (string, error) {
	if cp := os.Getenv("DLOCK_ZK_CLASSPATH"); cp != "" {
		return cp, nil
	}
	const jar = "/usr/share/java/zookeeper.jar"
	if _, err := os.Stat(jar); err != nil {
		return "", fmt.Errorf("ZooKeeper is not installed (%v)", err)
	}
	cp := jar
	// slf4j-simple for the logs; the Netty jars that the secure client
	// port needs and zookeeper.jar's manifest leaves out.
	for _, extra := range []string{"slf4j-simple", "netty-codec", "netty-resolver", "netty-transport-native-unix-common"} {
		p := "/usr/share/java/" + extra + ".jar"
		if _, err := os.Stat(p); err == nil {
			cp += ":" + p
		}
	}
	return cp, nil
}

func launchZK(dir string, n int, o ZKOptions) (*ZKCluster, error) {
	if n < 1 {
		return nil, errors.New("need at least one server")
	}
	cp, err := ZKClasspath()
	if err != nil {
		return nil, err
	}
	if _, err := exec.LookPath(zkJava()); err != nil {
		return nil, fmt.Errorf("java not found: %v", err)
	}
	// Each server needs a client port, and ensemble members a quorum and
	// an election port too.
	per := 1
	if n > 1 {
		per = 3
	}
	extra := 0
	if o.TLS != nil {
		extra = n
	}
	ports, err := freePorts(n*per + extra)
	if err != nil {
		return nil, err
	}
	if len(o.Hosts) != 0 && len(o.Hosts) != n {
		return nil, fmt.Errorf("%d hosts for %d servers", len(o.Hosts), n)
	}
	ip := func(id int) string { return hostAt(o.Hosts, id-1).ip() }
	c := &ZKCluster{dir: dir}
	// servers returns the server.N lines of server self's configuration.
	servers := func(self int) (string, error) {
		var b strings.Builder
		for i := 1; n > 1 && i <= n; i++ {
			q := ip(i) + ":" + strconv.Itoa(ports[n+2*(i-1)])
			e := ip(i) + ":" + strconv.Itoa(ports[n+2*(i-1)+1])
			if i != self && o.Peer != nil {
				var err error
				if q, err = o.Peer(self, i, false, q); err != nil {
					return "", err
				}
				if e, err = o.Peer(self, i, true, e); err != nil {
					return "", err
				}
			}
			fmt.Fprintf(&b, "server.%d=%s:%s\n", i, q, e[strings.LastIndexByte(e, ':')+1:])
		}
		return b.String(), nil
	}
	for i := 1; i <= n; i++ {
		port := ports[i-1]
		s := &ZKServer{ID: i, Addr: ip(i) + ":" + strconv.Itoa(port), Host: hostAt(o.Hosts, i-1)}
		sdir := filepath.Join(dir, fmt.Sprintf("zk%d", i))
		s.logPath = filepath.Join(sdir, "server.log")
		if o.Env != nil {
			s.env = o.Env(i)
		}
		if err := os.MkdirAll(filepath.Join(sdir, "data"), 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(sdir, "data", "myid"), []byte(strconv.Itoa(i)+"\n"), 0o644); err != nil {
			return nil, err
		}
		s.cfg = filepath.Join(sdir, "zoo.cfg")
		s.what, s.newCmd = fmt.Sprintf("ZooKeeper server %d", i), func() *exec.Cmd { return s.jvm(cp) }
		lines, err := servers(i)
		if err != nil {
			return nil, err
		}
		cfg := zkConfig(filepath.Join(sdir, "data"), ip(i), port, o) + lines
		if p := o.TLS; p != nil {
			secure := ports[n*per+i-1]
			s.SecureAddr = ip(i) + ":" + strconv.Itoa(secure)
			keyStore, err := zkKeyStore(sdir, p)
			if err != nil {
				return nil, err
			}
			cfg += fmt.Sprintf(`serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory
secureClientPort=%d
secureClientPortAddress=%s
ssl.keyStore.location=%s
ssl.keyStore.type=PEM
ssl.trustStore.location=%s
ssl.trustStore.type=PEM
ssl.clientAuth=need
`, secure, ip(i), keyStore, p.CA)
		}
		if err := os.WriteFile(s.cfg, []byte(cfg), 0o644); err != nil {
			return nil, err
		}
		c.Servers = append(c.Servers, s)
	}
	for _, s := range c.Servers {
		if err := s.start(); err != nil {
			c.Stop()
			return nil, err
		}
	}
	if err := c.WaitServing(60 * time.Second); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

// zkKeyStore writes the PKI's server key and certificate into one PEM
// file, the form of ZooKeeper's PEM key store.
func zkKeyStore(dir string, p *PKI) (string, error) {
	key, err := os.ReadFile(p.ServerKey)
	if err != nil {
		return "", err
	}
	cert, err := os.ReadFile(p.ServerCert)
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "keystore.pem")
	return path, os.WriteFile(path, append(key, cert...), 0o600)
}

// zkConfig returns the zoo.cfg lines (without server.N lines) of a
// project server listening on ip: the tick and syncLimit of o (small by
// default), admin server off, every four-letter word allowed, sessions of
// up to 60s.
func zkConfig(dataDir, ip string, clientPort int, o ZKOptions) string {
	tick, syncLimit := cmp.Or(o.Tick, ZKTickTime), cmp.Or(o.SyncLimit, 5)
	return fmt.Sprintf(`tickTime=%d
initLimit=10
syncLimit=%d
dataDir=%s
clientPort=%d
clientPortAddress=%s
maxClientCnxns=0
minSessionTimeout=%d
maxSessionTimeout=60000
admin.enableServer=false
4lw.commands.whitelist=*
standaloneEnabled=true
reconfigEnabled=false
`, tick.Milliseconds(), syncLimit, dataDir, clientPort, ip, 2*tick.Milliseconds())
}

func zkJava() string { return Getenv("JAVA", "java") }

// jvm returns the command of the server's JVM under a shell that kills
// it when the test binary goes away (its stdin pipe closes), so that a
// test killed by a timeout leaves no server behind.
func (s *ZKServer) jvm(cp string) *exec.Cmd {
	// A background job's stdin is /dev/null unless redirected: hand the
	// pipe to cat through fd 3.
	const guard = `exec 3<&0
"$@" </dev/null 3<&- & j=$!
{ cat <&3 >/dev/null; kill -9 $j 2>/dev/null; } &
exec 3<&-
wait $j`
	args := []string{"-c", guard, "sh", zkJava(),
		"-Xmx256m", "-Xms32m", "-XX:+UseSerialGC", "-Djava.net.preferIPv4Stack=true",
		"-Dzookeeper.admin.enableServer=false", "-Dznode.container.checkIntervalMs=1000",
		"-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
		"-Dorg.slf4j.simpleLogger.showDateTime=true",
		"-cp", cp, "org.apache.zookeeper.server.quorum.QuorumPeerMain", s.cfg}
	cmd := command(s.Host, s.env, "sh", args...)
	// Kill stops the group: the shell, the JVM and cat. The pipe's end
	// stays with cmd, which closes it once the shell has exited.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	_, _ = cmd.StdinPipe()
	return cmd
}

// Stop kills the server at once (SIGKILL), as a crash would. Its data
// stays, so Start brings it back with its state.
func (s *ZKServer) Stop() { s.Kill() }

// Start starts a stopped server again on its ports; it does not wait for
// it to serve (an ensemble member serves only once it has joined a
// quorum): see ZKCluster.WaitServing.
func (s *ZKServer) Start() error { return s.start() }

// Mode returns the server's mode from the srvr four-letter word:
// "standalone", "leader" or "follower"; an error when it does not serve.
func (s *ZKServer) Mode() (string, error) { return ZKMode(s.Addr) }

// Addrs returns the client addresses of the cluster's servers.
func (c *ZKCluster) Addrs() []string {
	return mapAddrs(c.Servers, func(s *ZKServer) string { return s.Addr })
}

// Leader returns the server that is leader (or the standalone server), or
// nil when none serves as such right now.
func (c *ZKCluster) Leader() *ZKServer {
	for _, s := range c.Servers {
		if !s.Running() {
			continue
		}
		if m, err := s.Mode(); err == nil && (m == "leader" || m == "standalone") {
			return s
		}
	}
	return nil
}

// WaitServing waits until every running server serves clients (an ensemble:
// a leader was elected and the others follow it).
func (c *ZKCluster) WaitServing(limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		var running []string
		for _, s := range c.Servers {
			select {
			case <-s.exitedCh(): // nil, never ready, unless it runs
				return fmt.Errorf("ZooKeeper server %d exited:\n%s", s.ID, logTail(s.logPath))
			default:
			}
			if s.Running() {
				running = append(running, s.Addr)
			}
		}
		err := zkServing(running)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			var logs strings.Builder
			for _, s := range c.Servers {
				fmt.Fprintf(&logs, "\n--- server %d (%s) log:\n%s", s.ID, s.Addr, logTail(s.logPath))
			}
			return fmt.Errorf("ZooKeeper did not serve within %v: %v%s", limit, err, logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Stop stops every server and removes the cluster's data when the cluster
// made its own directory.
func (c *ZKCluster) Stop() {
	for _, s := range c.Servers {
		s.Stop()
	}
	if c.ownDir {
		_ = os.RemoveAll(c.dir)
	}
}

// zkServing checks that every address serves clients, in an ensemble with
// one leader.
func zkServing(addrs []string) error {
	if len(addrs) == 0 {
		return errors.New("no server")
	}
	leaders := 0
	for _, a := range addrs {
		m, err := ZKMode(a)
		if err != nil {
			return err
		}
		if m == "leader" || m == "standalone" {
			leaders++
		}
	}
	if len(addrs) > 1 && leaders != 1 {
		return fmt.Errorf("%d leaders among %s", leaders, strings.Join(addrs, ","))
	}
	return nil
}

// ZKMode asks the server at addr for its mode with the srvr four-letter
// word: "standalone", "leader" or "follower".
func ZKMode(addr string) (string, error) {
	out, err := ZKFourLetter(addr, "srvr")
	if err != nil {
		return "", err
	}
	for line := range strings.Lines(out) {
		if m, ok := strings.CutPrefix(line, "Mode: "); ok {
			return strings.TrimSpace(m), nil
		}
	}
	return "", fmt.Errorf("%s does not serve: %q", addr, strings.TrimSpace(out))
}

// ZKFourLetter sends a four-letter word to the server at addr and returns
// its answer.
func ZKFourLetter(addr, word string) (string, error) {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := conn.Write([]byte(word)); err != nil {
		return "", err
	}
	b, err := io.ReadAll(conn)
	if err != nil && len(b) == 0 {
		return "", err
	}
	return string(b), nil
}
