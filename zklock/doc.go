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
// In code, use New or NewDriver with Options.
//
// # URL
//
//	zk://[user:password@]host:port[,host:port...]/prefix?param=value&...
//
// The host part lists the ensemble's servers (a server without a port
// uses DefaultPort, 2181). The path is the prefix, the znode under which
// locks live (default DefaultPrefix, "/dlock"). User information is a
// digest identity (Options.Auth) that every session authenticates with;
// the nodes the driver creates are then creator-only. Parameters:
//
//	session_timeout  the session timeout to ask for (default 10s, at least
//	                 100ms); the server clamps it to its own bounds
//	acl              the ACL of the nodes the driver creates (Options.ACL):
//	                 comma-separated creator, world or scheme:id, each with
//	                 an optional :rights of cdrwa; default creator with user
//	                 information, world without
//	tls              TLS to the servers' secure client port (true), with
//	                 cacert, cert, key, server_name and insecure_skip_verify
//	layout           the format of the lock nodes (Options.Layout): dlock
//	                 (the default), curator or kazoo
//
// besides dlock's shared ones (ttl, renew), which the ZooKeeper backend
// accepts but does not need: a lock lives as long as its session, not for
// a TTL. An unknown parameter is an error naming it.
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
// See https://github.com/dlockgo/dlock/blob/main/docs/ZOOKEEPER.md for the
// node layout and protocol, the lock kinds, the fencing token, sessions
// and the validity rule, securing the store, and the measurements, and
// https://github.com/dlockgo/dlock/blob/main/docs/INTEROP.md for the peers'
// layouts.
package zklock
