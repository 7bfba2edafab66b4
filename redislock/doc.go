// Package redislock is the dlock backend for a single Redis server (or a
// Redis Cluster), over a go-redis v9 client.
//
// # Use
//
// With a client of your own (the Locker does not close it):
//
//	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
//	locker, err := redislock.New(client, nil)
//
// Set ContextTimeoutEnabled on a client of your own: without it go-redis
// does not bound a call's socket I/O by the context's deadline, and a
// call to a server that stopped answering lasts until the client's
// ReadTimeout (see Requests below).
//
// Any redis.UniversalClient will do: a *redis.ClusterClient for Redis
// Cluster (every key of a lock is in one slot, see Keys), a failover
// client for Sentinel, or go-redis's *redis.AutoPipeliner (see Requests).
// URLs open a single server.
//
// Or from a URL, with the package imported for its side effect:
//
//	import _ "github.com/dlockgo/dlock/redislock"
//
//	locker, err := dlock.Open(ctx, "redis://127.0.0.1:6379/0?prefix=myapp:")
//
// # URLs
//
//	redis://[user:password@]host[:port][/db][?param=value&...]
//	rediss://...   the same over TLS (server name checked against host)
//	redis+sentinel://[user:password@]sentinel[:port][,sentinel...][/db]?master_name=name[&addr=sentinel...]
//	redis+cluster://[user:password@]node[:port][,node...][?addr=node...]
//	rediss+sentinel://..., rediss+cluster://...   the same over TLS
//
// redis:// names one server. redis+sentinel:// names the sentinels of a
// Sentinel-managed primary (go-redis's FailoverClient, which asks them for
// the primary and follows a failover): the host list and every addr
// parameter are sentinels (port 26379 by default), master_name (required)
// is the name they monitor the primary by, the user information is the
// primary's credentials, and sentinel_username and sentinel_password those
// of the sentinels, when they require them. redis+cluster:// names seed
// nodes of a Redis Cluster (go-redis's ClusterClient, which finds the
// others and follows slot moves and failovers); its database is 0 only.
// Credentials reach every node the client finds, not only those named
// (TestSentinelAuth, TestClusterAuth run with requirepass on every node
// and sentinel). A URL with several hosts and the plain redis:// scheme is
// refused, so that a topology is never mistaken for one server:
//
//	redis+sentinel://10.0.0.1:26379,10.0.0.2:26379,10.0.0.3:26379/0?master_name=locks
//	redis+cluster://10.0.1.1:6379,10.0.1.2:6379,10.0.1.3:6379?prefix=billing:
//
// The port defaults to 6379 and the database to 0. Opening pings the
// server (the primary, through the sentinels; a cluster node), so that a
// wrong address is reported at once: a refused connection (of the
// server, of every sentinel or seed listed, of the primary the sentinels
// name) after that one dial, a TLS URL to a server that does not speak
// TLS within dial_timeout, with an error that says so, and a server that
// accepts and never answers after at most dial_timeout plus read_timeout
// (8s by default), or by the context's deadline if that comes first. Messages show a URL with its
// passwords hidden. Parameters, besides dlock's own ttl and renew (see
// dlock.Open), the same for every form but where they say:
//
//	layout=dlock        how locks lie in Redis: dlock, or redsync (the plain key of
//	                    redsync and bsm/redislock, shared with their clients; see Layouts)
//	                    (Options.Layout)
//	                    redis://127.0.0.1:6379?layout=redsync&prefix=
//	prefix=dlock:       start of every key and channel name (Options.Prefix);
//	                    with layout=redsync, of the lock keys only, and empty by default
//	                    redis://127.0.0.1:6379?prefix=billing:
//	queue_ttl=3s        lifetime of a waiter's queue entry (Options.QueueTTL);
//	                    layout=dlock only
//	                    redis://127.0.0.1:6379?queue_ttl=1s
//	poll_interval=100ms mean interval of a waiter's attempts while the lock is held
//	                    (Options.PollInterval); layout=redsync only
//	                    redis://127.0.0.1:6379?layout=redsync&poll_interval=50ms
//	fence_ttl=168h      lifetime of a fencing counter from its seeding (Options.FenceTTL)
//	                    redis://127.0.0.1:6379?fence_ttl=720h
//	wait_replicas=0     replicas that must acknowledge a grant or renewal (WAIT) before it returns (Options.WaitReplicas)
//	                    redis://127.0.0.1:6379?wait_replicas=1
//	wait_timeout=1s     bound of that wait (Options.WaitTimeout)
//	                    redis://127.0.0.1:6379?wait_replicas=1&wait_timeout=200ms
//	dial_timeout=5s     connection timeout, a TLS handshake included (go-redis Options.DialTimeout)
//	                    redis://127.0.0.1:6379?dial_timeout=500ms
//	read_timeout=3s     reply timeout (go-redis Options.ReadTimeout)
//	                    redis://127.0.0.1:6379?read_timeout=1s
//	write_timeout=3s    send timeout (go-redis Options.WriteTimeout)
//	                    redis://127.0.0.1:6379?write_timeout=1s
//	pool_size=0         connection pool size; 0 keeps go-redis's default (10 per CPU)
//	                    redis://127.0.0.1:6379?pool_size=20
//	max_retries=3       command retries on network errors, a failed dial included
//	                    (each retry dials once: go-redis's DialerRetries is 1); -1
//	                    turns them off
//	                    redis://127.0.0.1:6379?max_retries=-1
//	client_name=        CLIENT SETNAME for every connection
//	                    redis://127.0.0.1:6379?client_name=billing-worker
//	master_name=        redis+sentinel:// only, required: the primary's name at the sentinels
//	                    redis+sentinel://127.0.0.1:26379?master_name=locks
//	addr=               redis+sentinel:// and redis+cluster:// only: one more sentinel or seed node
//	                    redis+cluster://127.0.0.1:7000?addr=127.0.0.1:7001&addr=127.0.0.1:7002
//	sentinel_username=  redis+sentinel:// only: the sentinels' ACL user
//	sentinel_password=  redis+sentinel:// only: the sentinels' password
//	                    redis+sentinel://127.0.0.1:26379?master_name=locks&sentinel_password=secret
//	tls=false           TLS on a redis:// form (the rediss forms always use it)
//	cacert=             PEM file of the authorities to trust; default the system's
//	cert=, key=         PEM files of the client's certificate and key, for a server
//	                    with tls-auth-clients
//	                    rediss://locks:pw@10.0.0.5:6380?cacert=/etc/dlock/ca.pem&cert=/etc/dlock/client.pem&key=/etc/dlock/client-key.pem
//	server_name=        the name the server's certificate must carry; default the
//	                    host dialled (each node's, on a topology)
//	insecure_skip_verify=false   accept any server certificate: for tests only
//
// The certificate files are read when the URL is opened; a missing or
// unreadable file is a *dlock.ParamError naming its parameter. See
// Securing the store.
//
// The client has ContextTimeoutEnabled set, so that a context's deadline
// bounds the socket I/O of every call. A missing host, a bad port or
// database, a bad value or an unknown parameter is a *dlock.ParamError
// naming it.
//
// # Keys
//
// In the default layout (layout=dlock; for layout=redsync see Layouts), a
// mutex called name uses at most four keys, all with the hash tag {name}
// so that they fall in one Redis Cluster slot (the other kinds of lock
// are described below, under Lock kinds):
//
//	<prefix>{<name>}         the lock: its owner value, with a TTL
//	<prefix>{<name>}:fence   the fencing counter
//	<prefix>{<name>}:q       the wait queue: owners, first come first served
//	<prefix>{<name>}:qe      the queue's entries: channel, TTL and deadline per owner
//
// Every operation is one Lua script, so one round trip: take (SET NX PX
// and the next token), refresh (owner-checked PEXPIRE), release
// (owner-checked DEL and handoff). The scripts run by EVALSHA, falling
// back to EVAL when the server does not have them.
//
// # Fencing tokens
//
// A successful acquisition increments the name's counter. A missing
// counter, never used or lost when Redis restarted without persistence, is
// first seeded from the server's clock in microseconds: tokens grow by one
// per acquisition, far slower than one per microsecond, so the seed is
// above every token handed out before. Tokens therefore increase across
// restarts, as long as the server's clock does not step back (nor a
// replacement server's clock run behind). The counter expires FenceTTL
// after it was seeded (its expiry is set only then, so acquisitions and
// renewals cost no PEXPIRE), so that names no longer used do not hold
// memory; reseeding from the clock keeps tokens increasing then too, even
// for a name in use. Tokens stay below 2^53 (exact in Lua's numbers) for centuries.
//
// # Requests
//
// Each call is one script, sent by the calling goroutine through the
// client, with the caller's context, as go-redis's Script.Run sends it:
// EVALSHA, then EVAL if the server lost its script cache (a restart, or
// SCRIPT FLUSH). The Driver adds no layer of its own between a call and
// go-redis, so a call is bounded by its context exactly as far as
// go-redis bounds it: a context's deadline bounds the socket I/O when the
// client has ContextTimeoutEnabled (clients opened from a URL have it),
// and waiting for a pooled connection ends with the context; a
// cancellation without a deadline does not interrupt a call already on
// the wire, which then ends with its reply or the client's ReadTimeout.
// The outcome of a call cut short is unknown: Acquire and TryLock then
// leave nothing held or queued. A lease's loss is signalled on time
// either way: the Locker's lease timer fires at the loss instant without
// waiting for a hung renewal.
//
// To coalesce the calls of concurrent goroutines into pipelines (one
// read and one write system call for many calls), pass go-redis's
// auto-pipelining client, which is a redis.UniversalClient:
//
//	ap, err := client.AutoPipeline()
//	locker, err := redislock.New(ap, nil)
//
// Mind what go-redis documents of it: a queued command runs on the
// AutoPipeliner's own context, not the caller's, and a batch that fails
// on a network error is retried whole unless MaxRetries is -1 (a retried
// release then reports the lock not held).
//
// # Waiting
//
// Waiters queue in Redis, and a release hands the lock straight to the
// first live waiter in the same script (it never falls free for the
// releaser to take again), then publishes the grant on the waiter's
// driver channel (on a Redis 7 Cluster, on the lock's shard channel: see
// Cluster). Each Driver subscribes to its own channel once, at its first
// Lock, for all its waiting calls. A waiter also
// re-checks when the holder's TTL runs out, so a crashed holder is taken
// over right then, and at least every third of its queue entry's lifetime
// (once a second by default), which keeps the entry alive and recovers a
// grant whose message was lost. A waiter whose context ends leaves the
// queue and passes on a lock handed to it meanwhile. See Options.QueueTTL for the one
// cost of a waiter that crashes while queued. TryLock never queues.
//
// # Lock kinds
//
// Besides the mutex, a Driver implements driver.Moder for every mode and
// driver.Elector: readers-writer locks (Locker.AcquireRead, AcquireWrite),
// semaphores (AcquirePermit) and elections (Campaign, Leader, Observe).
// Each kind has keys of its own, so the mutex, the readers-writer lock,
// the semaphore and the election called name are four unrelated locks;
// all keys of one name still share the hash tag {name}:
//
//	<prefix>rw:{<name>}        the writer: a hash of its owner and token, with a TTL
//	<prefix>rw:{<name>}:r      the readers: a sorted set of owners scored by expiry (ms)
//	<prefix>rw:{<name>}:t      the readers' tokens: owner -> token
//	<prefix>sem:{<name>}       the permit holders: a sorted set of owners scored by expiry (ms)
//	<prefix>sem:{<name>}:t     the holders' tokens: owner -> token
//	<prefix>le:{<name>}        the leader: a hash of its owner, token and value, with a TTL
//
// and for each kind a fencing counter (:fence), a wait queue (:q) and its
// entries (:qe) after the main key, as for the mutex. Every operation of a
// kind (try, wait, refresh, release) is one script, so one round trip.
// A holder kept in a sorted set that stops renewing (it crashed) drops
// out when its expiry passes: every script removes the expired members
// first. Each grant, of any kind, takes the next value of the kind's
// counter, so readers or permit holders holding together have distinct
// tokens.
//
// Waiting works as for the mutex: one FIFO queue per lock, handoff inside
// the script that frees the lock, grants published on the waiter's driver
// channel, and a re-check at the earliest known expiry of a holder in the
// way (a crashed one) and at least every third of the queue entry's
// lifetime. Readers and writers share one queue, each entry tagged with
// its side: a writer is admitted when no reader or writer holds the lock
// and it is at the head of the queue; readers when no writer holds it and
// no writer is queued ahead of them, and a release (or a queued writer
// giving up) admits all the consecutive readers at the head of the queue
// at once. So a waiting writer holds back the readers that come after it,
// and TryLock for reading fails while a writer holds or waits. A
// semaphore admits from the head of its queue while fewer than the
// caller's limit hold it (every user of a semaphore must pass the same
// limit). TryLock of any kind never queues and never overtakes a waiter.
//
// An election is a mutex whose stored holder also carries the
// candidate's value: Leader reads value and token in one script. Every
// change of leader (a grant, a resignation, a handoff; not a renewal) is
// published on <prefix>le:{<name>}:changed (a shard channel on a Redis 7
// Cluster). Observe follows that channel (the Driver subscribes while
// anyone on it observes the election, and go-redis subscribes again after
// a reconnection), and reads the leader again on
// each message, on each confirmation of the subscription (so a change
// made while the connection was down is caught) and right after the known
// expiry of the leader it last saw, which is how the end of a leader that
// crashed is noticed without polling.
//
// # Layouts
//
// layout=dlock (LayoutDlock, the default) is everything above. layout=redsync
// (LayoutRedsync) is the format of redsync (github.com/go-redsync/redsync/v4)
// and bsm/redislock (github.com/bsm/redislock) on one Redis: their clients
// and dlock's exclude each other on the same names, so that a service can
// move to dlock one instance at a time (docs/INTEROP.md has the
// peers' side, the handoff times measured and the recipe). The mutex
// called name is
//
//	<prefix><name>                    the lock: a string, the owner value (32 hex digits), PX the lease's TTL
//	dlock:fence:{<prefix><name>}      dlock's fencing counter, seeded as under Fencing tokens
//	dlock:released:{<prefix><name>}   the channel on which a dlock release wakes dlock's waiters
//
// and nothing else: no queue. The prefix starts the lock key only, and is
// empty by default, since a redsync mutex's key is the name given to
// NewMutex and a bsm/redislock lock's the key given to Obtain; with a
// prefix, the peers' key is the prefix and the name. Names are dlock's
// (dlock.ValidateName), so a peer's key outside that alphabet (a space, a
// brace) cannot be shared. dlock's own keys and channel start with
// "dlock:" whatever the prefix, and share the lock key's Redis Cluster
// slot: their hash tag is the whole lock key, which, holding no brace,
// hashes whole. Each operation is one script:
//
//	acquire  SET <key> <owner> NX PX <ttl>, then INCR of the counter (the token);
//	         when held, the holder's PTTL (TryLock's HeldError, a waiter's wake-up)
//	refresh  if GET <key> == <owner>: PEXPIRE <key> <ttl>
//	release  if GET <key> == <owner>: DEL <key>, PUBLISH <channel> ""
//	         (SPUBLISH on a Redis 7 Cluster)
//
// The peers write the same key the same way, each with a random value of
// its own: SET NX PX (redsync sends EX for a whole number of seconds),
// owner-checked PEXPIRE and DEL. So no write of one side touches a lock
// the other holds (but for bsm/redislock's re-obtain, a SET over a value
// that starts with the caller's token, which could take dlock's lock only
// for a client that fixes its token to a few hexadecimal digits: see
// docs/INTEROP.md), and the TTL means the same on all three: the key's
// lifetime from its last SET or PEXPIRE (redsync's expiry, bsm/redislock's
// ttl, dlock's TTL), after which a holder that stopped renewing has lost
// the lock to either side.
//
// Tokens. The plain key carries no counter, and the peers take no token:
// dlock's counter goes up by one in the script of each dlock grant, and
// only then. A token is strictly greater than those of every earlier dlock
// grant of the name (across restarts as under Fencing tokens), and says
// nothing of the peers' grants: one between two dlock grants bumps
// nothing. A resource guard that checks tokens (package fence) therefore
// orders dlock's holders only: it rejects a paused dlock holder's write
// once a later dlock holder has written, but never a peer's write (the
// peer has no token to pass), nor a paused dlock holder's write that
// comes after a peer's grant and before the next dlock grant. The tokens
// fence the resource once every client of the lock is dlock's.
//
// Waiting. The peers poll (redsync every 50 to 250 ms by default,
// bsm/redislock as its RetryStrategy says) and their releases announce
// nothing. There is no queue and no handoff, which would keep the key
// from the peers' waiters while dlock's kept coming: each attempt is the
// acquire script, and a waiter tries again when a dlock release
// publishes on the lock's channel
// (the Driver subscribes to it while one of its calls waits for the name,
// after a first attempt that failed), when the holder's TTL, read by the
// failed attempt, runs out (a crashed holder of either side), and every
// PollInterval (DefaultPollInterval, 100 ms, on average, drawn between
// half and one and a half times it), which is how a peer's release is
// seen. So after a dlock release dlock's waiters try within a round trip
// and the peers' at their next poll: under steady contention from dlock's
// side a peer's waiter gets the lock only when its poll finds the key
// free, as among redsync's clients themselves, where the releaser usually
// takes the lock back. Redis keyspace notifications (DEL and expired
// events) are not used: they are off unless notify-keyspace-events is
// set on the server, which costs a message for every matching write on
// it, locks or not; an expired event comes when Redis reclaims the key,
// which can be after its TTL, where the waiter's timer already is; on a
// Cluster they come from the key's node only; and they would shorten only
// the wait after a peer's release, already bounded by the poll.
//
// Kinds. The peers have no readers-writer, semaphore or election format,
// so the layout has the mutex only: Supports reports driver.Exclusive
// alone, and the other kinds' methods fail with an error matching
// dlock.ErrUnsupported that names the layout. Multi-locks (built on the
// mutex), Resume, WaitReplicas and the Cluster work as in layout=dlock.
// Inspect lists the names with a dlock counter (granted by dlock within
// FenceTTL) whose key is held, by either side: Owner is the stored value,
// Token 0 (the counter stands at dlock's last grant, which may not be the
// holder's) and Waiters -1 (who polls is not recorded).
//
// The two layouts keep different keys, so a dlock client of one does not
// exclude a dlock client of the other: every client of a name must use
// the same layout and prefix.
//
// # Measured limits
//
// From one run of dlock bench --scale against one redis-server 7.0 on the
// same 2 CPUs (docs/SCALING.md has the conditions, the command and the
// charts):
//
//   - Waiters on one name: 3,177–6,092 acquisitions a second with 1 to
//     1,000 waiters over 8 Lockers, every one handed to the next in the
//     queue; the longest wait at 1,000 was 443ms.
//   - Held locks: 100,000, at 371 bytes of server memory (168 at 10,000)
//     and 631 bytes of client heap each (3 to 6 million per GB); renewing
//     them every 10s (the default TTL) costs the server 1% and the client
//     3% of a CPU.
//   - Left after release: each name's fence counter, one key per name,
//     until it expires.
//   - Clients: 4,750 acquire+release a second from one, 23,584 from 64
//     (40µs client and 33µs server CPU each).
//
// # Eviction
//
// A lock is a key with a TTL. Under a maxmemory-policy other than
// noeviction, Redis at its memory limit deletes keys to make room: the
// volatile-* policies choose among keys with a TTL, which every lock key
// has, and the allkeys-* ones among all keys. An evicted lock key frees the
// lock at once, for anyone, while its holder still believes it holds it,
// until its next renewal finds it gone (about a third of the TTL later).
// So the driver reads the server's policy (CONFIG GET maxmemory-policy;
// each master's, for a Redis Cluster) and, if it may evict, logs one
// warning naming the policy, the server and the fix: maxmemory-policy
// noeviction on a Redis that holds locks (CONFIG SET and redis.conf; with
// noeviction, a write at the limit fails with an error instead, which an
// acquisition reports). dlock.Open reads it before it returns and logs on
// the logger of dlock.WithLogger (slog.Default() without one); NewDriver
// in the background, on Options.Logger (default slog.Default()). The policy is checked, not maxmemory: a server without
// a limit evicts nothing until one is set at run time. A server that
// refuses CONFIG (renamed or disabled, as on some managed services, or an
// ACL user without +config) is not checked; that is logged at Debug.
//
// # go-redis's own logs
//
// go-redis logs through a process-wide logger of its own, not through
// dlock.WithLogger: by default to stderr, a line per failed dial or pool
// event, for as long as a server is unreachable. dlock reports each
// failure that matters once (an acquisition's error, a renewal's warning),
// so route go-redis's lines to your slog.Logger at Debug with SlogLogger,
// once at start-up:
//
//	redis.SetLogger(redislock.SlogLogger(logger, slog.LevelDebug))
//
// (or silence them with go-redis's logging.Disable). This covers every
// go-redis client in the process, package redlock's too.
//
// # Safety
//
// This is a single-primary lock. Replication is asynchronous: if Redis
// fails over to a replica that had not yet received the latest writes, two
// clients can hold the lock at once, and the replica's fencing counter can
// be behind, so tokens can repeat. Use package redlock or a consensus
// store (ZooKeeper, etcd) where that matters. A restart without
// persistence is safe for tokens (see above) but drops every lock held.
//
// # Securing the store
//
// A Redis that holds locks should let only its lock users near them: a
// client that can write the lock keys can take any lock. Give dlock an
// ACL user of its own, limited to its prefix's keys and channels and to
// the commands it runs (its scripts run with the caller's permissions, so
// the commands they call count too); with the default prefix:
//
//	ACL SETUSER locks on >password ~dlock:* &dlock:* +ping +evalsha +eval
//	    +subscribe +unsubscribe +ssubscribe +sunsubscribe +time +exists
//	    +get +set +del +incr +pexpire +pttl +hget +hset +hdel +hmget +hgetall
//	    +rpush +lpop +lindex +lrem +llen +zadd +zrem +zscore +zcard +zrange
//	    +zrangebyscore +zremrangebyscore +publish +spublish +scan
//
// plus +wait for wait_replicas, +command|info on a Redis Cluster (whether
// it has SPUBLISH), and +config|get if the eviction check should run
// (without it, that check is skipped with a Debug line). The user's
// password goes in the URL (rediss://locks:password@host), never in a
// message: every URL printed is redacted. Over a network, use TLS
// (rediss://), with cert and key when the server requires client
// certificates (tls-auth-clients yes). TestSecured runs the conformance
// suite as exactly that user against a TLS-only Redis requiring client
// certificates, checks that the user cannot lock under another prefix
// (NOPERM), and that a wrong password, a wrong CA, a missing client
// certificate or a missing file each fail Open with an error naming the
// cause and showing no password.
//
// In layout=redsync the keys are the lock keys, dlock's counters and the
// release channels (see Layouts), and fewer commands run:
//
//	ACL SETUSER locks on >password ~orders/* ~dlock:fence:* &dlock:released:*
//	    +ping +evalsha +eval +subscribe +unsubscribe +ssubscribe +sunsubscribe
//	    +time +get +set +del +incr +pexpire +pttl +publish +spublish +scan
//
// with the pattern of the names shared in place of ~orders/* (~<prefix>*
// with a prefix), and the same additions. The peers' users need their
// lock keys too. TestPlainACL runs the conformance suite in that layout as
// such a user.
//
// # Sentinel
//
// A redis+sentinel:// Driver follows the primary the sentinels name.
// When the primary dies, no lock is granted until the sentinels promote a
// replica (down-after-milliseconds plus their election); a holder whose
// grant the promoted replica lacks loses its lock at its next renewal,
// which may come after another client was granted it. Measured by
// TestSentinelFailover (docs/SAFETY.md has the table and the command):
// with a primary, two replicas and three sentinels (down-after 1s) and the
// primary SIGKILLed right after a grant, grants resumed 2.2–2.5 s after
// the kill and no two clients held the lock at once; without WaitReplicas
// one token went back in 12 runs (the promoted replica lacked the
// counter's last increment), with WaitReplicas 1 none did.
// A primary cut off, with a holder, from its replicas and the sentinels
// (TestSentinelPartition, network namespaces) goes on renewing that
// holder's lock while the sentinels promote a replica, which lets the key
// expire and grants the lock to another client: without WaitReplicas the
// cut-off holder's lease was still seen held after the other's grant.
// With WaitReplicas, renewals wait for the replicas' acknowledgement too,
// so the cut-off holder's renewals fail and its lease ends before the
// promoted replica's copy of the key expires; docs/SAFETY.md has the
// figures.
// Recommended: wait_replicas=1 (or every replica, which also closes the
// case where the sentinels promote the replica that did not acknowledge),
// min-replicas-to-write on the primary so that an isolated primary stops
// granting, and fencing tokens checked by the resource. With
// wait_replicas equal to every replica, a failover leaves the new primary
// one replica short until the old primary rejoins as a replica: in that
// interval every acquisition fails, within wait_timeout, with an error
// matching ErrNotReplicated (TestSentinelWaitEveryReplica: the old primary
// rejoined and grants came again about 10 s after it was restarted).
//
// # Cluster
//
// A redis+cluster:// Driver keeps each lock's keys in one slot (the name
// in braces is the hash tag), so every script runs on the slot's primary,
// and Inspect scans every primary. A primary's failure stops grants for
// the names of its slots only, until its replica takes over
// (cluster-node-timeout plus the replica's election): with three primaries
// with a replica each (node timeout 1s) and the lock's primary SIGKILLed
// right after a grant, grants resumed 2.4–3.3 s after the kill and a lock
// held on another primary's slot across the failover kept its key and its
// lease (TestClusterFailover). go-redis rereads the slot map on MOVED and
// ASK replies; a dead primary sends neither, so the URL's client also
// rereads it every ClusterReloadInterval. While a slot migrates (a
// reshard), a script whose keys are split between the two primaries is
// refused (TRYAGAIN) and the primaries may redirect it back and forth
// (MOVED, ASK) until they agree on the new owner; none of these runs the
// script, so each call tries again every 20 ms for up to 10 s instead of
// failing: a lock held through the move keeps its lease, and its waiter
// gets it on release (TestClusterReshard, the slot held split over two
// primaries for 1.5 s). WAIT (WaitReplicas) is not
// offered on a Cluster client. On Redis 7 a waiter of every kind is
// woken by SPUBLISH on its lock's shard channel ("<prefix>{<name>}:g",
// in the lock's slot), which only that slot's primary and replicas carry,
// not by PUBLISH, which a cluster forwards to every node: the Driver
// subscribes (SSUBSCRIBE) to a name's channel while it waits for that
// name, and again where the slot went after a move or failover
// (TestCluster counts the SPUBLISH and the absent PUBLISH; the re-check
// timer stays the backstop). An election's changes go the same way, by
// SPUBLISH on its change channel, to which a Driver subscribes (SSUBSCRIBE)
// while anyone on it observes the election.
package redislock
