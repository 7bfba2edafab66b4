// Package redislock is the dlock backend for a single Redis server, a
// Sentinel-managed primary or a Redis Cluster, over a go-redis v9 client.
//
// # Use
//
// From a URL, with the package imported for its side effect:
//
//	import _ "github.com/dlockgo/dlock/redislock"
//
//	locker, err := dlock.Open(ctx, "redis://127.0.0.1:6379/0?prefix=myapp:")
//
// or with a client of your own (any redis.UniversalClient; the Locker does
// not close it) with ContextTimeoutEnabled, so that a context's deadline
// bounds a call's socket I/O:
//
//	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
//	locker, err := redislock.New(client, nil)
//
// # URL
//
//	redis://[user:password@]host[:port][/db][?param=value&...]
//	rediss://...   the same over TLS
//	redis+sentinel://[user:password@]sentinel[:port][,sentinel...][/db]?master_name=name
//	redis+cluster://[user:password@]node[:port][,node...]
//	rediss+sentinel://..., rediss+cluster://...   the same over TLS
//
// The port defaults to 6379 (26379 for sentinels) and the database to 0.
// Opening pings the server, so that a wrong address fails Open.
// Parameters, besides dlock's own ttl and renew:
//
//	layout=dlock        how locks lie in Redis: dlock, or redsync (Options.Layout)
//	prefix=dlock:       start of every key and channel name (Options.Prefix);
//	                    with layout=redsync, of the lock keys only, and empty by default
//	queue_ttl=3s        lifetime of a waiter's queue entry (Options.QueueTTL); layout=dlock only
//	poll_interval=100ms mean interval of a waiter's attempts (Options.PollInterval); layout=redsync only
//	fence_ttl=168h      lifetime of a fencing counter from its seeding (Options.FenceTTL)
//	wait_replicas=0     replicas that must acknowledge a grant or renewal (Options.WaitReplicas)
//	wait_timeout=1s     bound of that wait (Options.WaitTimeout)
//	dial_timeout=5s     connection timeout, a TLS handshake included
//	read_timeout=3s     reply timeout
//	write_timeout=3s    send timeout
//	pool_size=0         connection pool size; 0 keeps go-redis's default (10 per CPU)
//	max_retries=3       command retries on network errors; -1 turns them off
//	client_name=        CLIENT SETNAME for every connection
//	master_name=        redis+sentinel:// only, required: the primary's name at the sentinels
//	addr=               redis+sentinel:// and redis+cluster:// only: one more sentinel or seed node
//	sentinel_username=  redis+sentinel:// only: the sentinels' ACL user
//	sentinel_password=  redis+sentinel:// only: the sentinels' password
//	tls=false           TLS on a redis:// form (the rediss forms always use it)
//	cacert=             PEM file of the authorities to trust; default the system's
//	cert=, key=         PEM files of the client's certificate and key
//	server_name=        the name the server's certificate must carry; default the host dialled
//	insecure_skip_verify=false   accept any server certificate: for tests only
//
// A missing host, a bad port or database, a bad value, an unknown
// parameter, or a missing or unreadable file is a *dlock.ParamError naming
// it.
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
// hold the lock at once and repeat tokens (WaitReplicas narrows this). A
// maxmemory-policy other than noeviction can evict lock keys: the driver
// logs a warning when it finds one. Use package redlock or a consensus
// store where that matters. Route go-redis's own logs with SlogLogger.
//
// See https://github.com/dlockgo/dlock/blob/main/docs/REDIS.md for the
// details: URL examples, keys, requests, waiting, layouts, measured
// limits, eviction, securing the store, Sentinel and Cluster.
package redislock
