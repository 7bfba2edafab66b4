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
// empty. etcds:// (or tls=true) speaks TLS to every endpoint; user
// information is the etcd user and password (RBAC). Parameters:
//
//	dial_timeout=5s     how long Open waits for a member to answer
//	                    (DefaultDialTimeout); above zero
//	request_timeout=1s  how long each request may take before the driver
//	                    tries again (Options.RequestTimeout,
//	                    DefaultRequestTimeout); above zero
//	layout=dlock        the key format (Options.Layout): dlock, the driver's
//	                    own, or concurrency, that of etcd's concurrency
//	                    package and etcdctl lock/elect
//	tls=false           TLS on an etcd:// URL (etcds:// always uses it)
//	cacert=             PEM file of the authorities to trust; default the system's
//	cert=, key=         PEM files of the client's certificate and key
//	server_name=        the name the members' certificates must carry; default
//	                    the host dialled
//	insecure_skip_verify=false   accept any certificate: for tests only
//
// and dlock's shared ones, ttl and renew (renew has no effect here). An
// unknown parameter, a bad value, or a missing or unreadable certificate
// file is a *dlock.ParamError naming its parameter.
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
// See https://github.com/dlockgo/dlock/blob/main/docs/ETCD.md for the key
// format, waiting and its handoff, the other lock kinds, the layouts and
// how a URL's path maps to etcd's concurrency prefix, sessions and loss,
// failover, securing the store with RBAC and TLS, compatibility and the
// measurements.
package etcdlock
