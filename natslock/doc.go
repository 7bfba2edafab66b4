// Package natslock is the dlock backend for NATS JetStream: locks are
// keys of a JetStream KV bucket with per-key TTLs, over the official
// client github.com/nats-io/nats.go and its jetstream package. It needs
// nats-server 2.11 or later (per-key TTLs and the markers of expired
// keys).
//
// # Use
//
// With a connection of your own (the Locker does not close it):
//
//	nc, err := nats.Connect("nats://10.0.0.1:4222,nats://10.0.0.2:4222", nats.MaxReconnects(-1), nats.ReconnectBufSize(-1))
//	locker, err := natslock.NewConn(ctx, nc, &natslock.Options{Replicas: 3})
//
// or with a jetstream.JetStream (New), or from a URL, with the package
// imported for its side effect:
//
//	import _ "github.com/dlockgo/dlock/natslock"
//
//	locker, err := dlock.Open(ctx, "nats://10.0.0.1:4222,10.0.0.2:4222,10.0.0.3:4222/locks?replicas=3")
//
// Give a connection of your own nats.ReconnectBufSize(-1): by default
// nats.go buffers what is published while it reconnects and sends it
// afterwards, so an acquisition that timed out meanwhile could take its
// lock later, for nobody (it would then stay taken until its TTL).
// Connections opened from a URL have it, and reconnect for ever.
//
// # URLs
//
//	nats://[user:password@]host[:port][,host[:port]...][/bucket][?param=value&...]
//
// The host part lists servers of one cluster (port 4222 by default); the
// client picks one and fails over to the others, and to those the cluster
// announces. The path is the bucket (Options.Bucket), DefaultBucket
// ("dlock") when empty. User information authenticates, user and
// password both (a token goes in the token parameter, which messages hide
// as they hide passwords). Parameters, besides
// dlock's own ttl and renew (see dlock.Open):
//
//	replicas=1          servers that store a bucket the driver creates (Options.Replicas), 1 to 5
//	                    nats://10.0.0.1:4222,10.0.0.2:4222,10.0.0.3:4222?replicas=3
//	storage=file        where a created bucket keeps its messages: file or memory (Options.Storage)
//	                    nats://127.0.0.1:4222?storage=memory
//	marker_ttl=1m       how long markers of released and expired keys stay (Options.MarkerTTL), 1s at least
//	                    nats://127.0.0.1:4222?marker_ttl=10s
//	request_timeout=2s  bound of each request (Options.RequestTimeout)
//	                    nats://127.0.0.1:4222?request_timeout=1s
//	dial_timeout=5s     how long connecting to a server may take (nats.Timeout)
//	                    nats://127.0.0.1:4222?dial_timeout=1s
//	client_name=        the connection's name, shown by the server's monitoring
//	                    nats://127.0.0.1:4222?client_name=billing-worker
//	token=              an authentication token
//	                    nats://127.0.0.1:4222?token=s3cr3t
//	creds=              a .creds file: a user JWT and its nkey seed (decentralised auth)
//	                    nats://127.0.0.1:4222?creds=/etc/dlock/locks.creds
//	nkey=               a file holding a user's nkey seed
//	                    nats://127.0.0.1:4222?nkey=/etc/dlock/locks.nk
//	tls=false           TLS to every server
//	cacert=             PEM file of the authorities to trust; default the system's
//	cert=, key=         PEM files of the client's certificate and key, for servers that verify clients
//	                    nats://locks:pw@10.0.0.1:4222?tls=true&cacert=/etc/dlock/ca.pem&cert=/etc/dlock/client.pem&key=/etc/dlock/client-key.pem
//	server_name=        the name the servers' certificates must carry; default the host dialled
//	insecure_skip_verify=false   accept any certificate: for tests only
//
// One kind of credentials at most: user information, token, creds or nkey. The
// files are checked when the URL is opened; a missing or unreadable one,
// a bad value or an unknown parameter is a *dlock.ParamError naming its
// parameter. Opening connects and binds the bucket (creating it if it
// does not exist), so that a wrong address, a server older than 2.11 or a
// bucket without per-key TTLs fails Open. For anything else a
// *nats.Conn can do, configure one and use NewConn.
//
// # Keys
//
// The bucket's keys are
//
//	mutex.<name>     the mutex called name
//	elect.<name>     the election called name
//	sem.<name>.<i>   permit slot i (0 to limit-1) of the semaphore called name
//
// so the mutex, the election and the semaphore called x are unrelated
// locks. KV keys allow [-/_=.a-zA-Z0-9], and '.' separates subject
// tokens, while dlock names also hold ':', '@', '+' and '.': <name> is the
// name with each of '.', ':', '@', '+' and '=' written as '=' and two
// upper-case hex digits, as quoted-printable writes them (EncodeName):
// "orders/42" is mutex.orders/42, "job:nightly" is mutex.job=3Anightly,
// and "a.b" is mutex.a=2Eb. The encoding is injective ('=' is escaped
// too) and <name> is one subject token, so a watch of sem.<name>.* sees
// that semaphore's slots and no other's.
//
// A held key's value is text: the owner (32 hex digits), the fencing
// token, and the key's TTL, separated by spaces; for an election a
// newline and the candidate's value follow. The token is 0 in the write
// that took the lock, whose own revision is the token (the server assigns
// it), and the token itself in the renewals. A released key holds a
// purge marker (KV-Operation: PURGE, as nats.go's Purge writes), a key
// whose TTL ran out the server's marker (Nats-Marker-Reason: MaxAge);
// both expire after the marker TTL, after which a name nobody uses leaves
// nothing in the bucket. The nats CLI reads all of it: nats kv get locks
// mutex.orders/42, nats kv watch locks 'mutex.>'.
//
// # Requests
//
// Each operation is one write to the key's subject, with headers the
// server checks, so one round trip in the common case:
//
//	acquire  write the record, Nats-Expected-Last-Subject-Sequence: the key's marker's
//	         revision (or 0: no message), Nats-TTL: the lease's TTL
//	renew    write the record, Nats-Expected-Last-Subject-Sequence: the holder's last
//	         revision, Nats-TTL: the TTL again
//	release  write a purge marker, Nats-Expected-Last-Subject-Sequence: the holder's
//	         last revision, Nats-TTL: the marker TTL
//
// The KV API's Update cannot set a TTL, and its Create spends three round
// trips on a key that holds a marker; so the driver writes itself, and
// remembers the revision of the markers it writes and sees, which the
// next acquisition of the key names. An acquisition whose marker it does
// not know (the first on a key another client released) is refused, reads
// the key, and writes again: three round trips. Reads are message gets
// that the bucket stream's leader answers, not direct gets, which any
// replica answers and which can miss a write the leader acknowledged: a
// free lock would look held, and a new leader would not show in Leader. A key whose
// last write is a lock is held: TryLock then fails with a
// *dlock.HeldError giving the holder's remaining TTL.
//
// The server keeps TTLs in whole seconds and refuses shorter ones, so the
// key's TTL is the lease's rounded up to whole seconds (1s at least),
// while the lease's validity stays the TTL asked for, counted from before
// the write was sent: the key outlives the lease, never the reverse.
//
// Fencing tokens are revisions: the sequence numbers of the bucket's
// stream, which grow with every write to the bucket. A later grant of any
// name has a greater token, and with file storage (the default) the
// sequence survives a restart of the servers; with memory storage it
// starts again from 1 once they all restart. Tokens go back only if the
// stream is deleted and made again, or if the servers lose writes they
// had acknowledged (see Safety).
//
// Every request is bounded by RequestTimeout within the caller's context.
// A write whose answer does not come (a stream leader that just died)
// has an unknown outcome: the driver reads the key, and a record with the
// acquisition's owner means the write went through. An acquisition that
// returns an error after such a write leaves a goroutine that looks for
// the key until it would have expired and removes it if it finds it
// (Close ends it); a renewal or release tries again naming the revision
// it reads, when the key still holds its owner.
//
// # Waiting
//
// A waiting Acquire first makes TryLock's attempt; if the lock is held it
// watches the lock's key (a semaphore's every slot, with sem.<name>.*)
// through nats.go's KV watch, an ordered consumer, and tries again each
// time a key reports a marker: a release, or the marker the server writes
// when a holder's TTL runs out. Each try names the marker's revision, so
// among the waiters woken the first write wins and the others go on
// waiting. There is no queue: waiters are not served in order of arrival,
// and a releaser that asks again at once competes with them. No timer
// polls: the one timer a waiter sets is at the holder's expiry, counted
// from when it saw the holder's last write, plus 100ms, in case the
// expiry's marker was missed (nats.go recreates an ordered consumer that
// misses its heartbeats, which takes seconds after a server dies). Errors
// (a stream leader's election, a reconnection) are retried, within the
// caller's context, with a pause growing to a second. A waiter whose
// context ends stops its watch and leaves nothing on the store.
//
// # Lock kinds
//
// The driver implements driver.Moder for the mutex, the semaphore and
// the election, and driver.Elector, driver.Resumer and
// driver.Inspector.
//
// A semaphore of limit n is n slot keys, each a mutex: an acquisition
// takes any free one, trying them in order, and a waiter watches them
// all, so a release or an expiry of any slot wakes it. The permit's
// token is its slot's revision. Every user of a semaphore must pass the
// same limit: one with a greater limit uses more slots.
//
// An election is the mutex elect.<name>, whose record carries the
// candidate's value. Leader reads the key from the stream's leader, so
// it shows a campaign that has returned; Observe watches it and sends a
// leader when its value or token changes (not on renewals), and reads the
// key again at the leader's expiry in case the marker was missed.
//
// Readers-writer locks are not supported: Supports is false for
// driver.Read and driver.Write, and UnsupportedReason says why. A KV
// bucket changes one key per write, with no transaction over several:
// admitting a writer needs "no reader holds" and "the writer holds" in
// one step. Keys of their own for readers and the writer, each side
// writing its key and then reading the other's (a Dekker-style
// handshake), would rest on reads seeing every acknowledged write, which
// a stream leader that has lost its leadership without knowing it yet
// does not promise; and one key holding every reader would make readers'
// expiries a matter of the clients' clocks.
//
// Inspect lists every held key of the bucket under a prefix (the stream
// leader's list of the bucket's subjects, then a read of each key under
// the prefix), with owner, token, and expiry (the
// server's timestamp of the last write plus its TTL, on the server's
// clock); Waiters is -1, since waiters write nothing.
//
// # Safety
//
// A write is acknowledged once the bucket's stream has stored it: on a
// replicated bucket (Replicas 3), once a majority of its servers has, so
// a grant survives the loss of any minority of them, leader included. The
// expected-last-revision condition is checked by the stream's leader,
// which orders every write of the bucket, so of two concurrent
// acquisitions one is refused. The lease's validity is counted on the
// client's clock from before the write was sent, and the key's TTL from
// the server's timestamp of the write, so a holder's lease ends before
// the key expires as long as the servers' clocks run at the rate the
// client's does; a server whose clock jumps forward, or a new stream
// leader whose clock is ahead of the old one's, can expire a key early.
// A holder that learns of nothing (a paused process) still sees its loss
// at its first look, from the lease's expiry. An operator's purge of a
// key frees the lock at once; its holder learns of it at its next
// renewal.
//
// JetStream acknowledges a write once it is in the servers' memory and
// syncs its files every two minutes by default: a host that loses power
// can lose acknowledged writes, and with them the sequence, and tokens
// can repeat after it restarts. A process that dies loses nothing.
// Where that matters, set sync_interval: always in the servers'
// jetstream block, or use a replicated bucket on hosts that do not fail
// together.
//
// # Securing the store
//
// A client that can write the bucket's subjects can take any lock in it.
// Give dlock a user whose permissions cover the bucket and the JetStream
// API calls the driver makes, and nothing else; for the bucket "locks":
//
//	publish:   $KV.locks.>, $JS.API.INFO, $JS.API.STREAM.INFO.KV_locks,
//	           $JS.API.STREAM.CREATE.KV_locks (only if the driver is to create it),
//	           $JS.API.STREAM.MSG.GET.KV_locks, $JS.API.CONSUMER.CREATE.KV_locks.>,
//	           $JS.API.CONSUMER.DELETE.KV_locks.>, $JS.FC.KV_locks.>
//	subscribe: _INBOX.>
//
// Over a network use TLS (tls=true), with cert and key when the servers
// verify client certificates. Passwords are never shown: every URL in a
// message is redacted. TestSecured runs the conformance suite as exactly
// that user against a server that accepts TLS only and verifies client
// certificates, and checks that the user cannot open another bucket (Open
// names the server's permission refusal) and that a wrong password, a
// plain connection, an unknown CA, a missing client certificate and a
// missing file each fail Open naming the cause. Each other kind of
// credentials is tested against a real server as well: TestSecuredCreds
// runs the suite through creds= against a server in operator
// (decentralised JWT) mode, as a user whose JWT grants exactly those
// permissions, and a user of an account the server does not know is
// refused; TestSecuredNKey locks and releases through nkey= as an nkey
// user with those permissions, and an unknown seed is refused;
// TestSecuredToken locks and releases through token=, and a wrong token
// is refused without being shown.
package natslock
