// Package redislock is the dlock backend for Redis over a go-redis v9
// client: a redis:// URL opens one server, redis+sentinel:// a
// Sentinel-managed primary and redis+cluster:// a Redis Cluster.
//
// # Use
//
// From a URL, with the package imported for its side effect:
//
//	import _ "github.com/dlockgo/dlock/redislock"
//
//	locker, err := dlock.Open(ctx, "redis://127.0.0.1:6379/0?prefix=myapp:")
//
// or with a client of your own (the Locker does not close it):
//
//	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
//	locker, err := redislock.New(client, nil)
//
// Any redis.UniversalClient will do: a *redis.ClusterClient for a Redis
// Cluster, a failover client for Sentinel, or go-redis's auto-pipelining
// *redis.AutoPipeliner. Set ContextTimeoutEnabled on it: without it
// go-redis does not bound a call's socket I/O by the context's deadline,
// and a call to a server that stopped answering lasts until the client's
// ReadTimeout. Clients opened from a URL have it set.
//
// # URL
//
//	redis://[user:password@]host[:port][/db][?param=value&...]
//	rediss://...   the same over TLS (server name checked against host)
//	redis+sentinel://[user:password@]sentinel[:port][,sentinel...][/db]?master_name=name[&addr=sentinel...]
//	redis+cluster://[user:password@]node[:port][,node...][?addr=node...]
//	rediss+sentinel://..., rediss+cluster://...   the same over TLS
//
// For example:
//
//	redis+sentinel://10.0.0.1:26379,10.0.0.2:26379,10.0.0.3:26379/0?master_name=locks
//	redis+cluster://10.0.1.1:6379,10.0.1.2:6379,10.0.1.3:6379?prefix=billing:
//
// The port defaults to 6379 and the database to 0. redis+sentinel:// names
// the sentinels of a primary (go-redis's FailoverClient, which asks them
// for the primary and follows a failover): the hosts and every addr are
// sentinels (port 26379 by default), master_name is the name they monitor
// the primary by, the user information is the primary's credentials.
// redis+cluster:// names seed nodes (go-redis's ClusterClient, which finds
// the others and follows slot moves and failovers); its database is 0
// only. Credentials reach every node the client finds, not only those
// named. Several hosts with redis:// are refused, so that a topology is
// never mistaken for one server.
//
// Opening pings the server (the primary, through the sentinels; a cluster
// node), so that a wrong address fails Open: a refused connection (of
// the server, of every sentinel or seed listed, or of the primary the
// sentinels name) after one dial, a TLS URL to a server that does not
// speak TLS within dial_timeout, with an error that says so, and a server that accepts and never answers after at most
// dial_timeout plus read_timeout (8s by default), or at the context's
// deadline if that comes first. Messages show a URL with its passwords
// hidden. Parameters, besides dlock's own ttl and renew, the same for
// every form but where they say:
//
//	layout=dlock        how locks lie in Redis: dlock, or redsync, the plain key of
//	                    redsync and bsm/redislock, shared with their clients (Options.Layout)
//	prefix=dlock:       start of every key and channel name (Options.Prefix);
//	                    with layout=redsync, of the lock keys only, and empty by default
//	queue_ttl=3s        lifetime of a waiter's queue entry (Options.QueueTTL); layout=dlock only
//	poll_interval=100ms mean interval of a waiter's attempts while the lock is held
//	                    (Options.PollInterval); layout=redsync only
//	fence_ttl=168h      lifetime of a fencing counter from its seeding (Options.FenceTTL)
//	wait_replicas=      replicas that must acknowledge a grant or renewal (WAIT)
//	                    before it returns (Options.WaitReplicas); by default 1 where
//	                    the primary (or a Cluster master) has replicas, else none;
//	                    0 turns the wait off
//	wait_timeout=1s     bound of that wait (Options.WaitTimeout)
//	dial_timeout=5s     connection timeout, a TLS handshake included (go-redis DialTimeout)
//	read_timeout=3s     reply timeout (go-redis ReadTimeout)
//	write_timeout=3s    send timeout (go-redis WriteTimeout)
//	pool_size=0         connection pool size; 0 keeps go-redis's default (10 per CPU)
//	max_retries=3       command retries on network errors, a failed dial included
//	                    (each retry dials once); -1 turns them off
//	client_name=        CLIENT SETNAME for every connection
//	master_name=        redis+sentinel:// only, required: the primary's name at the sentinels
//	addr=               redis+sentinel:// and redis+cluster:// only: one more sentinel or seed node
//	sentinel_username=  redis+sentinel:// only: the sentinels' ACL user
//	sentinel_password=  redis+sentinel:// only: the sentinels' password
//	tls=false           TLS on a redis:// form (the rediss forms always use it)
//	cacert=             PEM file of the authorities to trust; default the system's
//	cert=, key=         PEM files of the client's certificate and key, for a server
//	                    with tls-auth-clients
//	server_name=        the name the server's certificate must carry; default the
//	                    host dialled (each node's, on a topology)
//	insecure_skip_verify=false   accept any server certificate: for tests only
//
// The certificate files are read when the URL is opened. A missing host,
// a bad port or database, a bad value, an unknown parameter, or a missing
// or unreadable file is a *dlock.ParamError naming it.
//
// # Guarantees
//
// A mutex called name is the key <prefix>{<name>} holding its owner value,
// with a TTL, beside a fencing counter, a wait queue and its entries, all
// in one Redis Cluster slot; every operation is one Lua script, so one
// round trip. Tokens come from the name's counter, seeded from the
// server's clock when missing, so they increase across restarts as long as
// that clock does not step back. Waiters queue in Redis and a release hands
// the lock to the first live waiter. The Driver implements driver.Moder
// for every mode and driver.Elector in LayoutDlock; LayoutRedsync shares
// the plain keys of redsync and bsm/redislock, and offers the mutex only.
//
// This is a single-primary lock: replication is asynchronous, so a
// failover to a replica that lacked the latest writes can let two clients
// hold the lock at once and repeat tokens (WaitReplicas, on by default where
// there are replicas, narrows this). A
// maxmemory-policy other than noeviction can evict lock keys: the driver
// logs a warning when it finds one. Use package redlock or a consensus
// store where that matters. Route go-redis's own logs with SlogLogger.
//
// # Securing the store
//
// Give dlock an ACL user of its own, limited to its prefix's keys and
// channels and to the commands it and its scripts run; with the default
// prefix:
//
//	ACL SETUSER locks on >password ~dlock:* &dlock:* +ping +evalsha +eval
//	    +subscribe +unsubscribe +ssubscribe +sunsubscribe +time +exists
//	    +get +set +del +incr +pexpire +pttl +hget +hset +hdel +hmget +hgetall
//	    +rpush +lpop +lindex +lrem +llen +zadd +zrem +zscore +zcard +zrange
//	    +zrangebyscore +zremrangebyscore +publish +spublish +scan
//
// plus +wait and +info for the wait for replicas (without +info a Driver
// cannot tell whether the primary has replicas: it logs a warning and
// does not wait, unless wait_replicas says how many), +command|info on a
// Redis Cluster, and +config|get for the eviction check (without it the
// check is skipped).
// In layout=redsync, with ~orders/* standing for the shared names'
// pattern (~<prefix>* with a prefix), and the same additions:
//
//	ACL SETUSER locks on >password ~orders/* ~dlock:fence:* &dlock:released:*
//	    +ping +evalsha +eval +subscribe +unsubscribe +ssubscribe +sunsubscribe
//	    +time +get +set +del +incr +pexpire +pttl +publish +spublish +scan
//
// Put the password in the URL (rediss://locks:password@host). Over a
// network use TLS, with cert and key when the server requires client
// certificates (tls-auth-clients yes).
//
// See https://github.com/dlockgo/dlock/blob/main/docs/REDIS.md for the
// design and its reasons: keys, requests, waiting, layouts, measured
// limits, eviction, the tests of the ACLs above, Sentinel and Cluster.
package redislock
