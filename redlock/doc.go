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
// Call Driver.Prepare at start-up to dial every node and load the scripts
// before the first lock, whose requests would otherwise pay for both
// within the node timeout. A Driver opened from a URL closes its clients on
// Close.
//
// # URL
//
//	redlock://[user:password@]node[:port][,node[:port]...][?param=value&...]
//
// A node without a port uses 6379; an IPv6 address is written in
// brackets, with or without a port. User information is the username and
// password of every node. For example:
//
//	redlock://127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003
//	redlock://:secret@redis-a,redis-b,redis-c:6380?node_timeout=10ms
//	redlock://[::1]:7001,[::1]:7002,[::1]
//
// Parameters, besides dlock's own ttl and renew:
//
//	node_timeout  how long one node has to answer, 5ms to 50ms; default 20ms
//	drift         the fixed part of the clock-drift allowance; default 2ms
//	prefix        the start of every key and the channel; default "dlock:rl:"
//	fencing       fencing tokens on (true, the default) or off (false: every
//	              token is 0, and acquisitions never take a second round trip)
//	fence_ttl     how long a counter outlives its lock's last use; default 168h
//	tls           TLS to every node (true); default false
//	cacert        PEM file of the authorities to trust; default the system's
//	cert, key     PEM files of the client's certificate and key, for nodes
//	              with tls-auth-clients
//	server_name   the name the nodes' certificates must carry; default the
//	              host dialled
//	insecure_skip_verify  accept any certificate: for tests only
//
// The certificate files are read when the URL is opened; a missing or
// unreadable one is a *dlock.ParamError naming its parameter.
//
// # Guarantees
//
// Every request goes to all N nodes at once, each bounded by the node
// timeout; a decision needs a quorum of N/2+1 nodes. A lock is valid until
// the instant before the acquisition was sent plus the TTL, less a drift
// allowance (DriftFactor of the TTL plus Options.Drift). Its token is the
// largest of the nodes' per-name counters, raised on a quorum when they
// differ. A failed attempt deletes its key on every node it may have
// reached; its error is a *driver.HeldError (matching
// dlock.ErrNotAcquired) when a quorum answered and the lock is held, and
// wraps dlock.ErrNoQuorum when too few nodes answered to decide. A waiting
// Acquire is woken by releases, and a lack of quorum does not end its
// wait: only its context, Close, or nodes refusing for good do.
//
// Redlock assumes the nodes' clocks run at about the same rate as the
// client's, and a node that restarts without persistence forgets the locks
// it held, so it should stay down for a TTL before rejoining. A paused
// holder may act after its lock expired: pass Lease.Token to the resource.
//
// # Securing the store
//
// Give dlock an ACL user on each node limited to the prefix's keys and
// channel and to its scripts' commands (+scan for Inspect, +config|get for
// the eviction check, skipped without it); with the default prefix:
//
//	ACL SETUSER locks on >password ~dlock:rl:* &dlock:rl:* +ping +evalsha
//	    +eval +script|load +exists +get +set +del +incr +pexpire +pttl
//	    +time +publish +subscribe +unsubscribe +scan
//
// Over a network use tls=true, with cert and key when the nodes require
// client certificates.
//
// See https://github.com/dlockgo/dlock/blob/main/docs/REDLOCK.md for the
// protocol, why the tokens strictly increase, the caveats (clock drift,
// restarts, eviction, the node timeout), client configuration, securing
// the nodes, go-redis's own logs, and the cost and measured limits.
package redlock
