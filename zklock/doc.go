// Package zklock is dlock's ZooKeeper backend (scheme zk://), on
// github.com/go-zookeeper/zk. It implements the classic lock recipe: each
// acquisition queues an ephemeral sequential znode, the first in line
// holds the lock, and every waiter watches only the node just before its
// own.
//
// Import the package for its side effect and open a URL:
//
//	import _ "github.com/dlockgo/dlock/zklock"
//
//	locker, err := dlock.Open(ctx, "zk://10.0.0.1:2181,10.0.0.2:2181,10.0.0.3:2181/myapp/locks?session_timeout=5s")
//
// In code, use New or NewDriver with Options, which also take the digest
// identities (Auth), the ACL of created nodes and a *slog.Logger for
// session events:
//
//	locker, err := zklock.New([]string{"10.0.0.1:2181", "10.0.0.2:2181"}, &zklock.Options{Prefix: "/myapp/locks"})
//
// A Driver owns its sessions (it watches the connection and closes a
// session it no longer trusts); it connects at once but does not wait for
// its first session to be established.
//
// # URL
//
//	zk://[user:password@]host:port[,host:port...]/prefix?param=value&...
//
// The host part lists the ensemble's servers (a server without a port
// uses DefaultPort, 2181). The path is the prefix, the znode under which
// locks live (default DefaultPrefix, "/dlock"); its segments follow the
// lock-name rules, and it may be neither / nor under /zookeeper. User
// information is a digest identity (Options.Auth) that every session
// authenticates with before anything else. Parameters:
//
//	session_timeout  the session timeout to ask for (default 10s, at least
//	                 100ms); the server clamps it to its minSessionTimeout..
//	                 maxSessionTimeout (2 to 20 ticks by default) and the
//	                 driver uses the granted value
//	acl              the ACL of the nodes the driver creates (Options.ACL):
//	                 comma-separated creator, world or scheme:id, each with
//	                 an optional :rights of cdrwa, as in acl=creator,world:r;
//	                 default creator with user information, world without
//	tls              TLS to the servers' secure client port (true), with
//	                 cacert, cert, key (PEM files read at Open), server_name
//	                 and insecure_skip_verify as for every dlock backend
//	layout           the format of the lock nodes (Options.Layout): dlock
//	                 (the default), curator (Apache Curator's) or kazoo
//	                 (kazoo's), to share locks with clients of that library
//
// besides dlock's shared ones (ttl, renew), which the ZooKeeper backend
// accepts but does not use: a lock lives as long as its session, not for
// a TTL. An unknown parameter is a *dlock.ParamError naming it.
//
// # Guarantees
//
// A lock is held as long as its node exists and the Driver's session
// lives: Grant.Expires is zero and nothing is renewed. Waiters are served
// first come, first served, and a release wakes exactly one waiter. A
// lease's fencing token is its lock node's czxid, so tokens strictly
// increase per name and across names, leader changes included. A session
// that reconnects within its timeout keeps its locks; the driver counts a
// session's validity from contact the ensemble's leader confirmed, so a
// holder's first look after that validity says lost before the leader can
// expire the session and give the lock to another client. The driver
// implements every kind of lock (driver.Moder and driver.Elector), each
// kind under a znode of its own. With layout=curator or layout=kazoo,
// dlock shares locks with Apache Curator's or kazoo's recipes on the same
// path; those layouts have no semaphore.
//
// Never write a lock node's data: that is how a release is announced
// (deleting a node, to break a lock, is fine). A holder paused or cut off
// for longer than the session timeout loses the lock: pass the fencing
// token to the resource.
//
// # Securing the store
//
// Give the URL user information (zk://user:password@...): every node the
// driver creates is then creator-only (ZooKeeper's auth scheme), so an
// unauthenticated client or another user can neither delete a held lock's
// node, nor queue beside it, nor remove the name's znode. Nodes that exist
// already keep their ACL. Open with credentials reads the prefix at once
// and fails, naming the identity but not the password, when it may not; a
// URL with TLS is checked at Open the same way, within the session
// timeout: a server that refuses the client's certificate, or a CA that
// did not sign the server's, fails Open with the TLS error.
//
// See https://github.com/dlockgo/dlock/blob/main/docs/ZOOKEEPER.md for the
// node layout and protocol, the lock kinds, the fencing token, sessions
// and the validity rule, securing the store, and the measurements, and
// https://github.com/dlockgo/dlock/blob/main/docs/INTEROP.md for the peers'
// layouts.
package zklock
