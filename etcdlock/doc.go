// Package etcdlock is dlock's etcd backend (schemes etcd:// and etcds://),
// built on go.etcd.io/etcd/client/v3. Its locks are as strong as etcd's
// linearizable reads and writes: a lock is granted by a Raft-committed
// transaction, and survives the loss of any minority of the cluster's
// members, leader included.
//
// Import the package for its side effect and open a URL, or, for anything
// else a *clientv3.Client can do, configure one and use New:
//
//	import _ "github.com/dlockgo/dlock/etcdlock"
//
//	locker, err := dlock.Open(ctx, "etcd://host1:2379,host2:2379,host3:2379/jobs?ttl=10s")
//	locker, err := etcdlock.New(client, &etcdlock.Options{Prefix: "jobs"}, dlock.WithTTL(10*time.Second))
//
// Close never closes a client passed to New, and closes the one it opened
// from a URL.
//
// # URL
//
//	etcd://[user:password@]host[:port][,host[:port]...]/prefix?param=value&...
//	etcds://user:password@host1:2379,host2:2379/prefix?cacert=/etc/dlock/ca.pem&cert=/etc/dlock/client.pem&key=/etc/dlock/client-key.pem
//
// The host part is a comma-separated list of endpoints (port 2379 by
// default; 127.0.0.1:2379 when empty). The path, without its slashes, is
// the key prefix (Options.Prefix), "dlock" when empty; with
// layout=concurrency, the path without its first slash, which may be
// empty (etcd://host) or / (etcd://host//). etcds:// (or tls=true) speaks
// TLS to every endpoint; user information is the etcd user and password
// (RBAC). Parameters:
//
//	dial_timeout=5s     how long Open waits for a member to answer
//	                    (DefaultDialTimeout); above zero; a shorter deadline of
//	                    Open's context ends the wait first, and the error
//	                    names whichever did
//	request_timeout=1s  how long each request may take before the driver
//	                    tries again (Options.RequestTimeout,
//	                    DefaultRequestTimeout); above zero
//	layout=dlock        the key format (Options.Layout): dlock, the driver's
//	                    own, or concurrency, that of etcd's concurrency
//	                    package and etcdctl lock/elect
//	tls=false           TLS on an etcd:// URL (etcds:// always uses it)
//	cacert=             PEM file of the authorities to trust; default the system's
//	cert=, key=         PEM files of the client's certificate and key, for
//	                    members with --client-cert-auth
//	server_name=        the name the members' certificates must carry; default
//	                    the host dialled
//	insecure_skip_verify=false   accept any certificate: for tests only
//
// and dlock's shared ones, ttl (30s by default) and renew (no effect
// here). An unknown parameter, a bad value (a layout other than dlock or
// concurrency, a password without a user), or a missing or unreadable
// certificate file is a *dlock.ParamError naming its parameter.
//
// # Guarantees
//
// Each acquisition writes one key under the lock's name, attached to the
// driver's session lease (one per TTL in use, kept alive every third of
// the TTL); the key with the lowest create revision holds the lock, and
// its create revision is the fencing token, so tokens grow with the order
// of grants across all names. Lease.Expires is the zero time: a lock is
// held until it is released or its session is lost. The driver reports
// the loss (Done closes, Err matches dlock.ErrLost) before the server can
// give the lock to anyone else, and Lease.Err sees it at once through
// driver.Grant.Check. A process that dies frees its locks when its lease
// expires: after the TTL, rounded up to whole seconds and raised to the
// server's minimum.
//
// The driver implements driver.Moder for every mode and driver.Elector in
// LayoutDlock. LayoutConcurrency writes exactly the keys of etcd's
// concurrency package, so that dlock, concurrency.Mutex and etcdctl lock
// exclude one another; in it, readers-writer locks and semaphores are
// unsupported, and a mutex and an election of one name are one queue.
// Every client of a name must use the same layout: the two do not exclude
// each other.
//
// # Securing the store
//
// Give dlock an etcd user whose role may read and write its prefix's key
// range only; for the default prefix
//
//	etcdctl role grant-permission locks --prefix=true readwrite dlock
//
// covers the key dlock that Open reads and every dlock/... lock key.
// Leases and watches need no other permission. Over a network use
// etcds://, with cert and key when the members require client
// certificates. Open names the cause of each failure: a wrong password
// ("authentication failed"), a role that does not cover the prefix
// ("permission denied", with the user), a CA that did not sign the
// members' certificates or a missing client certificate (which the etcd
// client reports only as a timeout: Open adds the TLS error it gets
// itself), a plain URL that reached a TLS member. No password appears in
// any message.
//
// See https://github.com/dlockgo/dlock/blob/main/docs/ETCD.md for the key
// format, waiting and its handoff, the other lock kinds, the layouts and
// how a URL's path maps to etcd's concurrency prefix, sessions and loss,
// failover, the test of RBAC and TLS, compatibility and the measurements.
package etcdlock
