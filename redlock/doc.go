// Package redlock is dlock's Redlock backend: a lock held on a quorum of N
// independent Redis masters (no replication between them), so that it
// survives the loss of any minority of them, with fencing tokens that
// strictly increase across acquisitions.
//
// Open it from a URL (the package registers the "redlock" scheme):
//
//	import _ "github.com/dlockgo/dlock/redlock"
//
//	locker, err := dlock.Open(ctx, "redlock://redis-a:6379,redis-b:6379,redis-c:6379,redis-d:6379,redis-e:6379")
//
// or from go-redis clients of your own, one per node, with New:
//
//	locker, err := redlock.New([]redis.UniversalClient{c1, c2, c3, c4, c5}, nil)
//
// # Protocol
//
// Every request goes to all N nodes at once, each bounded by the node
// timeout (Options.NodeTimeout, default 20ms); a decision needs a quorum of
// N/2+1 nodes.
//
// Acquire, phase 1: on each node, a script sets the lock's key to the
// owner value if it is free (SET NX PX ttl) and then advances that node's
// fencing counter for the name by one, returning it. A counter that does
// not exist yet starts at the node's clock in microseconds. With a quorum
// of keys set, the token is the largest counter returned. If every node of
// the quorum returned the same value, it is already stored on a quorum;
// otherwise phase 2 raises the counter to the token on every node where
// the lock is still the caller's, and needs a quorum too. The lock is
// valid until the instant before phase 1 was sent plus the TTL, less a
// drift allowance (DriftFactor of the TTL plus Options.Drift, by default
// 1% + 2ms); if the answers came so late that nothing is left, or either
// phase misses its quorum, the attempt deletes its key on every node it
// may have reached and fails. docs/REDLOCK.md explains why the tokens
// strictly increase, and under which assumptions.
//
// A failed attempt's error is a *driver.HeldError (matching
// dlock.ErrNotAcquired) when a quorum answered and the lock is held, with
// the shortest remaining TTL seen; it wraps dlock.ErrNoQuorum, and the
// first node's error (the first refusal, if a node refused for good),
// when too few nodes answered to decide.
//
// Refresh extends the key on every node where the caller holds it and
// needs a quorum; when fewer nodes can still hold it, the lease is lost.
// Unlock deletes the key where the caller holds it and publishes the
// lock's name on the release channel of each node that deleted it.
// Acquisitions, refreshes and releases return as soon as a quorum has
// answered alike; the slower nodes' requests still run, in order.
//
// Every request is one script call, EVALSHA through the node's go-redis
// client (EVAL when the node has lost its script cache), bounded by the
// node timeout. The caller's context ends the caller's wait, not the
// requests: once a call is made, every node is asked and its request
// runs to its answer or the node timeout, so a caller that cancels as soon
// as a call returns (or a release under a cancelled context) still leaves
// no key behind on the slower nodes. All nodes get the same
// command line, built once per call. Each node has one sender goroutine
// in the Driver, which sends that node's requests in order; requests that
// arrive while a batch is on the wire go out together in one pipeline,
// which is what keeps many concurrent locks cheap. A go-redis
// AutoPipeliner (Client.AutoPipeline) works as a node's client too, but
// the Driver batches already. Call Driver.Prepare at start-up to dial
// every node and load the scripts before the first lock, whose requests
// would otherwise pay for both within the node timeout.
//
// Waiting (Acquire) subscribes once per Driver, on every node, to the
// release channel ("<prefix>released"). Of one Driver's waiters for a
// name, only the first waits on the nodes; the others queue behind it in
// the process, in order of arrival, so that a release sets off one attempt
// per Driver rather than one per waiter. A release wakes that first
// waiter, which retries after a short random pause. Without a message it
// retries when the holder's key would expire, or, after a split vote or
// an attempt that too few nodes answered in time, after a random pause
// that grows with each such attempt in a row, up to 100ms. It never polls
// on a fixed interval, and a lack of quorum does not end the wait: only
// ctx does (its error is then joined with the last attempt's), Close, or
// so many nodes refusing the requests for good (NOPERM, WRONGPASS, a
// rejected certificate) that no quorum is left.
//
// # Keys
//
// For a lock named orders/42 with the default prefix, each node holds
//
//	dlock:rl:{orders/42}        the owner value, with the lock's TTL
//	dlock:rl:{orders/42}:fence  the fencing counter, kept for FenceTTL (7 days)
//
// The braces are a Redis Cluster hash tag: a lock and its counter share
// one slot.
//
// # URL
//
// The host part lists the nodes, separated by commas; a node without a
// port uses 6379. User information, if any, is the username and password
// of every node:
//
//	redlock://127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003
//	redlock://:secret@redis-a,redis-b,redis-c:6380
//	redlock://[::1]:7001,[::1]:7002,[::1]
//
// An IPv6 address is written in brackets, with or without a port.
//
// Parameters:
//
//	node_timeout  how long one node has to answer, 5ms to 50ms; default 20ms
//	              redlock://h1:6379,h2:6379,h3:6379?node_timeout=10ms
//	drift         the fixed part of the clock-drift allowance; default 2ms
//	              redlock://h1:6379,h2:6379,h3:6379?drift=5ms
//	prefix        the start of every key and the channel; default "dlock:rl:"
//	              redlock://h1:6379,h2:6379,h3:6379?prefix=myapp:locks:
//	fencing       fencing tokens on (true, the default) or off (false: every
//	              token is 0, and acquisitions never take a second round trip)
//	              redlock://h1:6379,h2:6379,h3:6379?fencing=false
//	fence_ttl     how long a counter outlives its lock's last use; default 168h
//	              redlock://h1:6379,h2:6379,h3:6379?fence_ttl=720h
//	tls           TLS to every node (true); default false
//	cacert        PEM file of the authorities to trust; default the system's
//	cert, key     PEM files of the client's certificate and key, for nodes
//	              with tls-auth-clients
//	              redlock://locks:pw@h1,h2,h3?tls=true&cacert=/etc/dlock/ca.pem&cert=/etc/dlock/client.pem&key=/etc/dlock/client-key.pem
//	server_name   the name the nodes' certificates must carry; default the
//	              host dialled
//	insecure_skip_verify  accept any certificate: for tests only
//
// The certificate files are read when the URL is opened; a missing or
// unreadable file is a *dlock.ParamError naming its parameter.
//
// and dlock's own ttl and renew (see dlock.Open):
//
//	redlock://h1:6379,h2:6379,h3:6379?ttl=10s&renew=true
//
// A Driver opened from a URL makes its own go-redis clients, with
// ContextTimeoutEnabled (so that the node timeout bounds socket reads) and
// no retries of commands or dials (a dead node fails at once), and closes
// them on Close.
//
// # Securing the store
//
// Each node should give dlock an ACL user limited to the prefix's keys
// and channel and to the commands of its scripts (see the redislock
// documentation, Securing the store); with the default prefix:
//
//	ACL SETUSER locks on >password ~dlock:rl:* &dlock:rl:* +ping +evalsha
//	    +eval +script|load +exists +get +set +del +incr +pexpire +pttl
//	    +time +publish +subscribe +unsubscribe +scan
//
// (+scan for Inspect). Over a network use tls=true, with cert and key when
// the nodes require client certificates. A TLS handshake takes longer than
// a command: Driver.Prepare dials every node within its context rather than
// the node timeout, and reports a refused password or certificate with the
// node's reason. TestSecured runs the conformance suite as such a user on
// three TLS-only nodes requiring client certificates, and checks those
// refusals.
//
// # Eviction
//
// Lock keys carry a TTL, so a node whose maxmemory-policy is not
// noeviction may evict them at its memory limit (volatile-* policies evict
// keys with a TTL, allkeys-* any key): the holder then loses that node's
// vote without knowing, and once a quorum's keys are gone another client
// can take the lock. NewDriver (and so dlock.Open) reads every node's
// policy in the background, each within 5 s, and logs one
// warning on Options.Logger (default slog.Default(); dlock.Open passes
// the logger of dlock.WithLogger) naming the nodes that may evict and the fix,
// maxmemory-policy noeviction on every node. Nodes that are down or refuse
// CONFIG GET are not checked; that is logged at Debug.
//
// # go-redis's own logs
//
// go-redis logs through a process-wide logger of its own, past
// dlock.WithLogger: a Redlock run with nodes restarting printed 1,630
// "failed to dial" lines. Route them as package redislock's documentation
// says under the same heading (redislock.SlogLogger), or with a type of
// your own with go-redis's one method, Printf(ctx, format, v...).
//
// # Safety
//
// Redlock inherits the limits of every TTL lock (a paused holder may act
// after its lock expired: pass Lease.Token to the resource and let it
// reject stale tokens) and adds its own: it assumes the nodes' clocks run
// at about the same rate as the client's, and a node that restarts without
// persistence forgets the locks it held, so it should stay down for a TTL
// before rejoining. docs/REDLOCK.md discusses both.
package redlock
