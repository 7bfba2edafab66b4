package testenv

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

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
	s.Addr = s.Host.ip() + ":" + strconv.Itoa(s.port)
	s.t, s.what, s.logPath, s.newCmd, s.timeout = t, s.String(), filepath.Join(s.dir, "redis.log"), s.command, 10*time.Second
	s.ready = func() error { return pingRedisWith(s.options()) }
	t.Cleanup(s.Kill)
	s.Start()
	return s
}

// command is the server's redis-server command.
func (s *RedisServer) command() *exec.Cmd {
	args := []string{"--port", strconv.Itoa(s.port), "--bind", s.Host.ip(), "--dir", s.dir,
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

// RedisLockACL is the least a Redis ACL user needs for redislock on the
// key and channel prefix prefix, as the redislock documentation gives it
// (Securing the store): the scripts (EVALSHA, EVAL) and every command they
// call, the pub/sub of grants and elections, and what Inspect reads.
func RedisLockACL(prefix string) []string {
	return []string{"~" + prefix + "*", "&" + prefix + "*", "+ping", "+evalsha", "+eval", "+subscribe", "+ssubscribe",
		"+unsubscribe", "+sunsubscribe", "+scan", "+time", "+exists", "+get", "+set", "+del", "+incr",
		"+pexpire", "+pttl", "+hget", "+hset", "+hdel", "+hmget", "+rpush", "+lpop", "+lindex", "+lrem",
		"+zadd", "+zrem", "+zscore", "+zcard", "+zrange", "+zrangebyscore", "+zremrangebyscore",
		"+publish", "+spublish", "+llen", "+hgetall"}
}

// StartSecuredRedis starts a Redis that speaks TLS only with pki's
// server certificate and requires client certificates its CA signed; its
// default user has adminPassword, and user (with password) has
// RedisLockACL(prefix) only.
func StartSecuredRedis(t testing.TB, pki *PKI, adminPassword, user, password, prefix string) *RedisServer {
	t.Helper()
	args := append([]string{"--requirepass", adminPassword, "--user", user, "on", ">" + password}, RedisLockACL(prefix)...)
	return StartRedis(t, RedisOptions{TLS: pki, Password: adminPassword, Args: args})
}

// SentinelMaster is the master name the sentinels of StartSentinel monitor.
const SentinelMaster = "dlock"

// SentinelSetup is a Sentinel-managed Redis on loopback ports of the
// test's own: a primary, its replicas and the sentinels that watch them.
// The sentinels declare the primary down after 1 s without an answer and
// then fail over to a replica. Everything is stopped when the test ends.
type SentinelSetup struct {
	// Servers are the data nodes: Servers[0] is the primary at the start,
	// the others its replicas. A failover may change that: Primary tells.
	Servers   []*RedisServer
	Sentinels []*SentinelServer
}

// SentinelServer is one redis-sentinel process.
type SentinelServer struct {
	Addr string
	// Host is the test host the sentinel runs on, or nil.
	Host     *Host
	password string
	process
}

// SentinelOptions configure StartSentinel. Zero values mean the defaults.
type SentinelOptions struct {
	Replicas int // default 2
	// Password, when set, is required by the data nodes (requirepass,
	// masterauth) and by the sentinels themselves (requirepass, and
	// auth-pass towards the nodes).
	Password string
	// Hosts, when set, places the processes on test network hosts
	// (StartNet): data node i (0 the primary, then the replicas) on
	// Hosts[i], sentinel j on Hosts[1+Replicas+j].
	Hosts []*Host
}

// StartSentinel starts a primary, o.Replicas replicas in sync with it and
// three sentinels (quorum two) monitoring it as SentinelMaster, and waits until
// every sentinel knows every replica and the other sentinels. It fails t
// when redis-server or redis-sentinel is missing.
func StartSentinel(t testing.TB, o SentinelOptions) *SentinelSetup {
	t.Helper()
	if _, err := exec.LookPath("redis-sentinel"); err != nil {
		t.Fatalf("redis-sentinel not found (%v); install it with %s", err, ServicesScript)
	}
	o.Replicas = cmp.Or(o.Replicas, 2)
	const sentinels, downAfter = 3, time.Second
	auth := []string{"--repl-diskless-sync-delay", "0"}
	if o.Password != "" {
		auth = append(auth, "--requirepass", o.Password, "--masterauth", o.Password)
	}
	host := func(i int) *Host {
		if len(o.Hosts) == 0 {
			return nil
		}
		if i >= len(o.Hosts) {
			t.Fatalf("StartSentinel: %d hosts for %d data nodes and %d sentinels", len(o.Hosts), 1+o.Replicas, sentinels)
		}
		return o.Hosts[i]
	}
	primary := StartRedis(t, RedisOptions{Args: auth, Password: o.Password, Host: host(0)})
	ps := &SentinelSetup{Servers: []*RedisServer{primary}}
	phost, port, _ := strings.Cut(primary.Addr, ":")
	for i := range o.Replicas {
		// Replicas of the primary at start; after a failover the sentinels
		// reconfigure them (and a restarted old primary) themselves.
		r := StartRedis(t, RedisOptions{Args: append([]string{"--replicaof", phost, port}, auth...), Password: o.Password, Host: host(1 + i)})
		ps.Servers = append(ps.Servers, r)
	}
	for _, r := range ps.Servers[1:] {
		waitSynced(t, r)
	}
	quorum := sentinels/2 + 1
	for j := range sentinels {
		s := &SentinelServer{password: o.Password, Host: host(1 + o.Replicas + j)}
		p := freePort(t)
		s.Addr = s.Host.ip() + ":" + strconv.Itoa(p)
		dir := t.TempDir()
		confPath := filepath.Join(dir, "sentinel.conf")
		s.t, s.what, s.logPath, s.timeout = t, "redis-sentinel "+s.Addr, filepath.Join(dir, "sentinel.log"), 10*time.Second
		s.newCmd = func() *exec.Cmd { return command(s.Host, nil, "redis-sentinel", confPath, "--loglevel", "warning") }
		s.ready = func() error { return pingRedisWith(&redis.Options{Addr: s.Addr, Password: s.password}) }
		conf := fmt.Sprintf("port %d\nbind %s\nprotected-mode no\ndir %s\nsentinel resolve-hostnames no\n"+
			"sentinel monitor %s %s %s %d\nsentinel down-after-milliseconds %s %d\n"+
			"sentinel failover-timeout %s %d\nsentinel parallel-syncs %s 1\n",
			p, s.Host.ip(), dir, SentinelMaster, phost, port, quorum, SentinelMaster, downAfter.Milliseconds(),
			SentinelMaster, max(3*downAfter.Milliseconds(), 3000), SentinelMaster)
		if o.Password != "" {
			conf += fmt.Sprintf("sentinel auth-pass %s %s\nrequirepass %s\n", SentinelMaster, o.Password, o.Password)
		}
		must(t, os.WriteFile(confPath, []byte(conf), 0o600))
		t.Cleanup(s.Kill)
		s.Start()
		ps.Sentinels = append(ps.Sentinels, s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, s := range ps.Sentinels {
		c := redis.NewSentinelClient(&redis.Options{Addr: s.Addr, Password: o.Password})
		err := poll(30*time.Second, 50*time.Millisecond, nil, func() error {
			reps, err1 := c.Replicas(ctx, SentinelMaster).Result()
			sens, err2 := c.Sentinels(ctx, SentinelMaster).Result()
			if err := errors.Join(err1, err2); err != nil || len(reps) != o.Replicas || len(sens) != sentinels-1 {
				return fmt.Errorf("%d replicas, %d other sentinels (%v)", len(reps), len(sens), err)
			}
			return nil
		})
		_ = c.Close()
		if err != nil {
			t.Fatalf("sentinel %s did not learn the topology: %v", s.Addr, err)
		}
	}
	return ps
}

// SentinelAddrs returns the sentinels' addresses.
func (ps *SentinelSetup) SentinelAddrs() []string {
	return mapAddrs(ps.Sentinels, func(s *SentinelServer) string { return s.Addr })
}

// Primary asks the sentinels which server is the primary now, and returns
// it (nil if the sentinels name none of Servers).
func (ps *SentinelSetup) Primary(ctx context.Context) (*RedisServer, error) {
	var lastErr error
	for _, s := range ps.Sentinels {
		c := redis.NewSentinelClient(&redis.Options{Addr: s.Addr, Password: s.password})
		a, err := c.GetMasterAddrByName(ctx, SentinelMaster).Result()
		_ = c.Close()
		if err != nil {
			lastErr = err
			continue
		}
		addr := a[0] + ":" + a[1]
		for _, r := range ps.Servers {
			if r.Addr == addr {
				return r, nil
			}
		}
		return nil, fmt.Errorf("the sentinels name %s, not one of the servers", addr)
	}
	return nil, lastErr
}

// waitSynced waits until replica r's link to its primary is up.
func waitSynced(t testing.TB, r *RedisServer) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: r.Addr, Password: r.password})
	defer c.Close()
	err := poll(20*time.Second, 20*time.Millisecond, nil, func() error {
		info, err := c.Info(context.Background(), "replication").Result()
		if err == nil && !strings.Contains(info, "master_link_status:up") {
			err = fmt.Errorf("link down:\n%s", info)
		}
		return err
	})
	if err != nil {
		t.Fatalf("replica %s did not sync: %v", r.Addr, err)
	}
}

// ClusterSetup is a Redis Cluster on loopback ports of the test's own:
// Servers[0:3] start as the three primaries (the slots split evenly
// among them), each followed by its replicas. Nodes time out after
// NodeTimeout, after which a replica of a failed primary takes over.
type ClusterSetup struct {
	Servers     []*RedisServer
	NodeTimeout time.Duration
}

// ClusterOptions configure StartRedisCluster. Zero values mean the
// defaults.
type ClusterOptions struct {
	Replicas    int           // per primary; default 1
	NodeTimeout time.Duration // default 1s
	// Password, when set, is required by every node (requirepass,
	// masterauth).
	Password string
}

// StartRedisCluster starts a Redis Cluster (redis-server in cluster mode,
// joined by redis-cli --cluster create) and waits until every node sees
// the cluster state ok. It fails t when redis-server or redis-cli is
// missing.
func StartRedisCluster(t testing.TB, o ClusterOptions) *ClusterSetup {
	t.Helper()
	if _, err := exec.LookPath("redis-cli"); err != nil {
		t.Fatalf("redis-cli not found (%v); install it with %s", err, ServicesScript)
	}
	o.Replicas = cmp.Or(o.Replicas, 1)
	o.NodeTimeout = cmp.Or(o.NodeTimeout, time.Second)
	cs := &ClusterSetup{NodeTimeout: o.NodeTimeout}
	args := []string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
		"--cluster-node-timeout", strconv.FormatInt(o.NodeTimeout.Milliseconds(), 10),
		"--repl-diskless-sync-delay", "0"}
	create := []string{"--cluster", "create"}
	if o.Password != "" {
		args = append(args, "--requirepass", o.Password, "--masterauth", o.Password)
		create = append([]string{"--no-auth-warning", "-a", o.Password}, create...)
	}
	for range 3 * (1 + o.Replicas) {
		s := StartRedis(t, RedisOptions{Args: args, Password: o.Password})
		cs.Servers = append(cs.Servers, s)
		create = append(create, s.Addr)
	}
	create = append(create, "--cluster-replicas", strconv.Itoa(o.Replicas), "--cluster-yes")
	if out, err := exec.Command("redis-cli", create...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, s := range cs.Servers {
		c := redis.NewClient(&redis.Options{Addr: s.Addr, Password: o.Password})
		err := poll(30*time.Second, 50*time.Millisecond, nil, func() error {
			info, err := c.ClusterInfo(ctx).Result()
			if err == nil && !(strings.Contains(info, "cluster_state:ok") && strings.Contains(info, "cluster_known_nodes:"+strconv.Itoa(len(cs.Servers)))) {
				err = fmt.Errorf("not ok:\n%s", info)
			}
			return err
		})
		_ = c.Close()
		if err != nil {
			t.Fatalf("cluster node %s not ready: %v", s.Addr, err)
		}
	}
	return cs
}

// Addrs returns every node's address.
func (cs *ClusterSetup) Addrs() []string {
	return mapAddrs(cs.Servers, func(s *RedisServer) string { return s.Addr })
}

// MoveSlot migrates hash slot slot, with its keys, from the primary at
// from to the primary at to, the way redis-cli --cluster reshard moves
// each slot: IMPORTING on the target, MIGRATING on the source, MIGRATE of
// its keys in batches, then the slot assigned to the target on every
// primary. Between the steps it calls between (if not nil) with the
// number of keys moved so far, so that a test can act mid-migration.
func (cs *ClusterSetup) MoveSlot(ctx context.Context, slot int, from, to string, between func(moved int)) error {
	src := redis.NewClient(&redis.Options{Addr: from})
	defer src.Close()
	dst := redis.NewClient(&redis.Options{Addr: to})
	defer dst.Close()
	srcID, err := src.ClusterMyID(ctx).Result()
	if err != nil {
		return err
	}
	dstID, err := dst.ClusterMyID(ctx).Result()
	if err != nil {
		return err
	}
	if err := dst.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", srcID).Err(); err != nil {
		return fmt.Errorf("SETSLOT IMPORTING: %w", err)
	}
	if err := src.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", dstID).Err(); err != nil {
		return fmt.Errorf("SETSLOT MIGRATING: %w", err)
	}
	host, port, _ := strings.Cut(to, ":")
	moved := 0
	for {
		keys, err := src.ClusterGetKeysInSlot(ctx, slot, 1).Result()
		if err != nil {
			return err
		}
		if len(keys) == 0 {
			break
		}
		if between != nil {
			between(moved)
		}
		args := []any{"MIGRATE", host, port, "", 0, 5000, "REPLACE", "KEYS"}
		for _, k := range keys {
			args = append(args, k)
		}
		if err := src.Do(ctx, args...).Err(); err != nil && !strings.Contains(err.Error(), "NOKEY") {
			return fmt.Errorf("MIGRATE: %w", err)
		}
		moved += len(keys)
	}
	if between != nil {
		between(moved)
	}
	// The target first, then the source, then the others, as redis-cli
	// does: a source that names the target before the target owns the slot
	// would bounce clients between the two.
	order := []string{to, from}
	for _, s := range cs.Servers {
		if s.Running() && s.Addr != to && s.Addr != from {
			order = append(order, s.Addr)
		}
	}
	for _, addr := range order {
		c := redis.NewClient(&redis.Options{Addr: addr})
		role, _ := c.Do(ctx, "ROLE").Slice()
		if len(role) > 0 && role[0] == "master" {
			err = c.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", dstID).Err()
		}
		_ = c.Close()
		if err != nil {
			return fmt.Errorf("SETSLOT NODE on %s: %w", addr, err)
		}
	}
	return nil
}

// SlotOf returns key's hash slot, the address of the primary that holds
// it and of another primary: the two ends of a MoveSlot of that key.
func (cs *ClusterSetup) SlotOf(t testing.TB, key string) (slot int, from, to string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cs.Addrs()})
	defer c.Close()
	n, err := c.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	src, err := c.MasterForKey(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	from = src.Options().Addr
	var mu sync.Mutex
	err = c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		mu.Lock() // ForEachMaster calls in parallel
		defer mu.Unlock()
		if a := m.Options().Addr; a != from && to == "" {
			to = a
		}
		return nil
	})
	if err != nil || to == "" {
		t.Fatalf("no primary but %s (%v)", from, err)
	}
	return int(n), from, to
}
