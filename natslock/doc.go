// Package natslock is the dlock backend for NATS JetStream: locks are
// keys of a JetStream KV bucket with per-key TTLs, over the official
// client github.com/nats-io/nats.go and its jetstream package. It needs
// nats-server 2.11 or later (per-key TTLs and the markers of expired
// keys).
//
// # Use
//
// From a URL, with the package imported for its side effect:
//
//	import _ "github.com/dlockgo/dlock/natslock"
//
//	locker, err := dlock.Open(ctx, "nats://10.0.0.1:4222,10.0.0.2:4222,10.0.0.3:4222/locks?replicas=3")
//
// or with a connection of your own (the Locker does not close it), or a
// jetstream.JetStream (New):
//
//	nc, err := nats.Connect("nats://10.0.0.1:4222,nats://10.0.0.2:4222", nats.MaxReconnects(-1), nats.ReconnectBufSize(-1))
//	locker, err := natslock.NewConn(ctx, nc, &natslock.Options{Bucket: "locks", Replicas: 3}, dlock.WithTTL(10*time.Second))
//
// Give a connection of your own nats.ReconnectBufSize(-1): by default
// nats.go buffers what is published while it reconnects and sends it
// afterwards, so an acquisition that timed out meanwhile could take its
// lock later, for nobody (until its TTL). Connections opened from a URL
// have it, and reconnect for ever. Close closes the connection it opened
// from a URL, never one passed to NewConn or New.
//
// # URL
//
//	nats://[user:password@]host[:port][,host[:port]...][/bucket][?param=value&...]
//	nats://locks:password@10.0.0.1:4222/locks?tls=true&cacert=/etc/dlock/ca.pem&cert=/etc/dlock/client.pem&key=/etc/dlock/client-key.pem
//
// The host part lists servers of one cluster (port 4222 by default); the
// client fails over among them and those the cluster announces. The path
// is the bucket (Options.Bucket), of letters, digits, - and _, and
// DefaultBucket ("dlock") when empty. User information authenticates, user
// and password both. Parameters, besides dlock's own ttl (30s by default)
// and renew:
//
//	replicas=1          servers that store a bucket the driver creates (Options.Replicas),
//	                    1 to 5; use 3 on a cluster
//	storage=file        where a created bucket keeps its messages: file or memory
//	                    (Options.Storage); with memory the sequence, and so the
//	                    tokens, start again from 1 when every server restarts
//	marker_ttl=1m       how long markers of released and expired keys stay (Options.MarkerTTL), 1s at least
//	create=true         create the bucket if it does not exist; false fails instead (Options.NoCreate)
//	request_timeout=2s  bound of each request (Options.RequestTimeout)
//	dial_timeout=5s     how long connecting to a server may take (nats.Timeout)
//	client_name=        the connection's name, shown by the server's monitoring
//	token=              an authentication token (a parameter, so that messages hide it)
//	creds=              a .creds file: a user JWT and its nkey seed (decentralised auth)
//	nkey=               a file holding a user's nkey seed
//	tls=false           TLS to every server
//	cacert=             PEM file of the authorities to trust; default the system's
//	cert=, key=         PEM files of the client's certificate and key, for
//	                    servers with verify: true
//	server_name=        the name the servers' certificates must carry; default the host dialled
//	insecure_skip_verify=false   accept any certificate: for tests only
//
// One kind of credentials at most: user information, token, creds or
// nkey. A missing or unreadable file, a bad value, a bucket name with
// other characters, a password without a user or a user without a
// password, or an unknown parameter is a *dlock.ParamError naming it.
// Opening connects and binds the bucket (creating it if it does not
// exist), so that a wrong address, a server older than 2.11 or an existing
// bucket without per-key TTLs (made without LimitMarkerTTL) fails Open.
//
// # Guarantees
//
// The bucket's keys are mutex.<name>, elect.<name> and sem.<name>.<i>
// (slot i of a semaphore), with the name encoded by EncodeName. Every
// acquisition, renewal and release is one write that the bucket's stream
// leader accepts only if the key's last revision is the one the writer
// names; on a replicated bucket it is acknowledged once a majority of its
// servers stored it. The fencing token is the write's revision, the
// bucket stream's sequence, so a later grant of any name has a greater
// token. A lease's validity is counted on the client's clock from before
// the write was sent; the key's TTL, rounded up to whole seconds, outlives
// it. Waiters watch the key, with no polling and no queue across Lockers.
//
// The driver implements driver.Moder for the mutex, the semaphore and the
// election, and driver.Elector, driver.Resumer and driver.Inspector.
// Readers-writer locks are not supported: Supports is false for
// driver.Read and driver.Write, and UnsupportedReason says why.
//
// JetStream syncs its files every two minutes by default: a host that
// loses power can lose acknowledged writes, and tokens can then repeat.
//
// # Securing the store
//
// Give dlock a user whose permissions cover its bucket and the JetStream
// API calls the driver makes, and nothing else; for the bucket locks:
//
//	permissions: {
//	  publish: ["$KV.locks.>", "$JS.API.INFO", "$JS.API.STREAM.INFO.KV_locks",
//	    "$JS.API.STREAM.CREATE.KV_locks",   # only if the driver is to create the bucket
//	    "$JS.API.STREAM.MSG.GET.KV_locks", "$JS.API.CONSUMER.CREATE.KV_locks.>",
//	    "$JS.API.CONSUMER.DELETE.KV_locks.>", "$JS.FC.KV_locks.>"]
//	  subscribe: ["_INBOX.>"]
//	}
//
// The same permissions serve a user of a JWT (creds) or an nkey. Over a
// network use tls=true, with cert and key when the servers verify client
// certificates.
//
// See https://github.com/dlockgo/dlock/blob/main/docs/NATS.md for the
// key and value format, the requests and their headers, waiting, the lock
// kinds, failover, the tests of the permissions and credentials,
// compatibility and the measurements.
package natslock
