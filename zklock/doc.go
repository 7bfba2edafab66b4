// Package zklock is dlock's ZooKeeper backend (scheme zk://), on
// github.com/go-zookeeper/zk. It implements the classic lock recipe: each
// acquisition queues an ephemeral sequential znode, the first in line
// holds the lock, and every waiter watches only the node just before its
// own.
//
// # URL
//
//	zk://[user:password@]host:port[,host:port...]/prefix?session_timeout=10s
//
// for example
//
//	zk://10.0.0.1:2181,10.0.0.2:2181,10.0.0.3:2181/myapp/locks?session_timeout=5s
//	zk://locks:password@10.0.0.1:2181,10.0.0.2:2181/myapp/locks
//
// The host part lists the ensemble's servers (a server without a port
// uses DefaultPort, 2181). The path is the prefix, the znode under which
// locks live (default DefaultPrefix, "/dlock"). User information is a
// digest identity (Options.Auth) that every session authenticates with
// before anything else; see Securing the store. Parameters:
//
//	session_timeout  the session timeout to ask for (default 10s, at least
//	                 100ms); the server clamps it to its own bounds
//	acl              the ACL of the nodes the driver creates (Options.ACL):
//	                 a comma-separated list of creator (the creating
//	                 session's identities), world (anyone) or scheme:id
//	                 (ip:10.0.0.0/8, digest:user:hash), each with an
//	                 optional :rights of cdrwa (all without); default
//	                 creator with user information, world without
//	                 zk://locks:pw@h:2181/locks?acl=creator,world:r
//	tls              TLS to the servers' secure client port (true); with
//	                 cacert, cert, key, server_name and insecure_skip_verify
//	                 as for every dlock backend (the CA, the client's
//	                 certificate and key, PEM files read at Open)
//	                 zk://locks:pw@h:2281/locks?tls=true&cacert=/etc/dlock/ca.pem&cert=/etc/dlock/client.pem&key=/etc/dlock/client-key.pem
//
//	layout           the format of the lock nodes (Options.Layout): dlock
//	                 (the default), curator (Apache Curator's) or kazoo
//	                 (kazoo's), so that dlock shares locks with clients of
//	                 that library; see Layouts
//	                 zk://10.0.0.1:2181/services/locks?layout=curator
//
// besides dlock's shared ones (ttl, renew), which the ZooKeeper backend
// accepts but does not need: a lock lives as long as its session, not for
// a TTL. An unknown parameter is an error naming it. In code, use New or
// NewDriver with Options instead.
//
// # Securing the store
//
// ZooKeeper lets any client of the ensemble delete any node its ACL does
// not protect, and a lock whose node is deleted is lost. With user
// information in the URL (or Options.Auth), every node the driver
// creates (the prefix's path, each name's znode, the lock nodes) gets the
// ACL "creator": all rights to the identities of the session that created
// it and none to anyone else. Then neither an unauthenticated client nor
// another user can delete a held lock's node, queue beside it, or remove
// the name's znode (each needs a right on the parent the ACL denies), and
// only clients of the same user take those locks. Nodes that exist
// already keep their ACL: a prefix first used without credentials stays
// open. ZooKeeper accepts any digest password at authentication and
// refuses it only where an ACL names another identity, so Open with
// credentials reads the prefix's children at once: a wrong password (or
// another user) on a prefix created by this user fails Open with an error
// that says so, without the password. A URL with TLS is checked at Open
// the same way, within the session timeout: a server that refuses the
// client's certificate, or a CA that did not sign the server's, fails Open
// with the TLS error. TestSecured and TestSecuredTLS (through a secure
// client port that requires client certificates) check all of this
// against real servers.
//
// # Layout
//
// The mutex called "orders/42" is the znode <prefix>/orders/42; name
// segments are path segments. Its children are the lock nodes, ephemeral
// and sequential, named _c_<guid>-lock#<sequence>, where guid is the
// acquisition's owner value. The node with the lowest sequence number
// holds the lock; the others wait in sequence order, so waiters are served
// first come, first served. The name's znode and its parents are
// container znodes: the server removes them once they are empty, so the
// names of locks no longer used do not pile up. A name's znode can also be
// the parent of a longer name's ("a" and "a/b"); lock nodes carry a '#',
// which no name can contain, so the two never mix.
//
// Acquiring a free lock takes one round trip: a multi-op creates the lock
// node and touches its parent, whose returned stat gives the node's czxid
// and the number of children. The creation is protected: when its reply is
// lost with the connection, the node is found again by its guid rather
// than left behind to block the queue.
//
// A waiter reads the children once, watches its predecessor with a data
// watch, and waits. A holder releases with a multi-op that sets its node's
// data and deletes it: the next waiter's watch fires with NodeDataChanged,
// which tells it that its predecessor was the holder, so it holds the lock
// at once, without reading the children again (sequence numbers only grow:
// nobody can have got in front of it). A release wakes exactly one waiter,
// and a hand-over costs one notification. When a waiter in front of it
// gives up (its node is simply deleted), a waiter reads the children again
// and watches its new predecessor. Hence a rule for operators: never write
// a lock node's data (deleting one, to break a lock, is fine).
//
// # Lock kinds
//
// The driver implements every kind of lock dlock knows (driver.Moder and
// driver.Elector), each on the same queue of ephemeral sequential nodes,
// and each kind under a znode of its own, so that the mutex "x", the
// readers-writer lock "x", the semaphore "x" and the election "x" never
// meet: <prefix>/x, <prefix>/#rw/x, <prefix>/#sem/x and <prefix>/#elect/x
// (no lock name contains a '#'). Every waiter watches a single node, or,
// for a semaphore's first waiter only, the name's children.
//
// Readers-writer lock: readers queue _c_<guid>-read#<seq> nodes, writers
// _c_<guid>-write#<seq>. A writer holds the lock when its node is the
// lowest and waits for the node just before its own; a reader holds it
// when no write node is lower than its own and waits for the nearest lower
// write node. A waiting writer thus stops the readers that arrive after it,
// consecutive readers hold together, and waiters are served in order of
// arrival. TryAcquireRead fails while a writer holds or waits.
//
// Semaphore: _c_<guid>-permit#<seq> nodes; a node holds a permit when fewer
// than limit nodes are lower than its own. The first waiter watches the
// name's children (it wakes at each departure and arrival); every later
// waiter watches the node just before its own, and a waiter that gets a
// permit sets its node's data, which wakes the one waiter behind it, now
// first. A crashed holder's node goes with its session, and its permit
// with it. Users of one semaphore must pass the same limit.
//
// Election: a mutex whose nodes hold the candidates' values as their data;
// the lowest leads. Leader reads the lowest node and its data, after a
// sync (the server, a follower or even the leader, may lag behind writes
// another client saw committed); Observe runs one goroutine per observer
// that watches the leader's node (or, when nobody leads, the election's
// children), so arrivals of candidates wake no observer.
//
// The lease of every kind is session-bound like a mutex's, with the same
// fencing token, the same Refresh (a check that the node still exists) and
// the same loss signal.
//
// # Layouts
//
// With a peer library's layout (Options.Layout, or layout= in the URL), a
// dlock lock and that library's lock on the same path exclude each other
// and queue together, first come first served across both: a service can
// move to dlock one instance at a time, and Go, Java and Python services
// can share locks. The lock called name is the znode <prefix>/<name>, and
// the peer's recipe takes the same path: zk://h:2181/app/locks?layout=curator
// and the name "orders/42" are Curator's lock on "/app/locks/orders/42".
// (The prefix must lie below the root: a peer's lock directly under "/"
// has no dlock name.) Every kind of lock of the layout lives on the
// name's znode itself, as the peer keeps it; each recipe reads only its
// own kind of node. The node names, each followed by the ten-character
// sequence number the server appends:
//
//	curator  mutex    _c_<uuid>-lock-        InterProcessMutex (and LeaderSelector)
//	         rw       _c_<uuid>-__READ__     InterProcessReadWriteLock's read lock
//	                  _c_<uuid>-__WRIT__     and its write lock
//	         election _c_<uuid>-latch-       LeaderLatch; the node's data is the id
//	kazoo    mutex    <uuid hex>__lock__     Lock
//	         rw       <uuid hex>__rlock__    ReadLock
//	                  <uuid hex>__lock__     WriteLock (and Lock: they exclude each other)
//	         election <uuid hex>__lock__     Election (a Lock); the data is the identifier
//
// where uuid is the acquisition's guid written as a UUID. The queue order
// is the sequence number, as for the peers, and the rules are theirs and
// dlock's alike: the lowest node holds a mutex or leads; a writer holds
// when its node is the lowest, a reader when no write node is lower.
// Tokens are still the czxid of the holder's node, so they keep their
// meaning across both sides: every holder's node, dlock's or the peer's,
// has a greater czxid than the one before it. A peer's lock has no
// semaphore format dlock can share (Curator's InterProcessSemaphoreV2 and
// kazoo's Semaphore serialise their clients through a second lock and
// count lease nodes under another znode), so these layouts have none:
// Supports(driver.Permit) is false.
//
// The layouts differ from dlock's own in three ways. The kinds share the
// name's znode, so in kazoo's layout the mutex, the write lock and the
// election of one name are one queue (as kazoo's Lock, WriteLock and
// Election on one path are). A release deletes the holder's node without
// first setting its data (the peers' waiters, Curator's LeaderLatch among
// them, listen for the deletion, which a data change would pre-empt), so
// a dlock waiter lists the children again after a release unless it knew
// its predecessor held. And kazoo's layout makes the name's znode and its
// parents persistent, as kazoo does (a kazoo Lock fails when its znode
// has gone): they stay after use, as kazoo's own do. Curator's layout
// makes them containers, as Curator does.
//
// kazoo 2.8 (Debian 12's python3-kazoo) has a bug of its own in ReadLock:
// it waits for the newest write node, even one queued after its own, and
// so deadlocks with any writer, kazoo's or dlock's, that queues behind it
// (kazoo#649, fixed in kazoo 2.9). Its Lock, WriteLock and Election are
// not affected. The tests in the interop module (docs/INTEROP.md) run
// dlock beside the real Curator 5.4 and kazoo 2.8.
//
// # Fencing token
//
// A lease's token is its lock node's czxid, the zxid of the transaction
// that created it. Zxids are global and strictly increasing across the
// ensemble, leader changes included (the leader's epoch is their high 32
// bits), so tokens strictly increase per name, and across names too, even
// after a name's znode was removed and created again. Readers or permit
// holders that hold together have distinct tokens, in the order of their
// nodes, which is also the order in which the ensemble let them in; two of
// them granted together may learn of it in either order.
//
// # Sessions and loss
//
// A Driver has one ZooKeeper session at a time, shared by its locks. A
// lock is held as long as its node exists and its session lives: Grant
// Expires is zero, nothing is renewed, and Lease.Refresh only checks that
// the node still exists. The lease's Done closes when the node disappears
// (deleted by an operator or another client: noticed through a watch on
// the node, set once the lock has been held for 25ms) or at once when the
// session ends. No goroutine waits per held lock: the session's event
// callback receives the watch's notification, and the session's end
// reaches every lock through Grant.OnLost.
//
// When the connection to the ensemble is lost, the session is SUSPENDED:
// the client reconnects, to any server of the ensemble, and while it
// reconnects within the session timeout the session and its locks live on;
// leases stay held and queued waiters keep their place. The session is
// LOST when the server reports it expired, or when its validity ends: nine
// tenths of the granted timeout after the last instant at which the
// ensemble's leader is known to have touched the session. Only the leader
// expires sessions, and a follower cut off from it goes on answering pings
// for syncLimit × tickTime, so the driver does not count every frame a
// server sends: it sends a sync through its server every sixth of the
// timeout, and counts a server's touch as confirmed only once two later
// requests that the leader must answer (syncs, writes) show that the
// follower reported the touch to the leader (the argument is in
// docs/ZOOKEEPER.md and at session.confirmedAt). Every lock's Grant.Check,
// which Lease.Err calls, compares the clock with that validity, and the
// session's watchdog ends the session at the same instant, so the holder's
// first look after the validity's end says lost, and Done closes, before
// the leader can expire the session and give the lock to another client.
// The driver then closes that session for good (so that it cannot come
// back with its locks after all), its leases end lost, and the next call
// opens a new session. A waiter whose session was lost queues again, at
// the back, on the new session.
//
// A release while the connection is lost does not leave the node behind:
// the delete is retried through reconnections until it succeeds or the
// session is lost (which removes the node too). A cancelled or timed-out
// Acquire removes its node before it returns (or, if the ensemble cannot
// be reached, as soon as it can).
//
// # Limits
//
// A lock does not expire while its holder's process keeps its session
// alive: a holder that is stuck but running keeps the lock. A holder
// paused (GC, SIGSTOP) or cut off for longer than the session timeout
// loses the lock; its first Lease.Err after it resumes says so, but a
// write already under way cannot be stopped: pass the fencing token to
// the resource.
//
// The validity rule assumes that the leader pings each follower about
// every tick/2 and that tick ≤ timeout/2 (true unless minSessionTimeout
// is set below two ticks). A leader cut off from the quorum answers its
// own clients' syncs until it notices (up to syncLimit ticks), while the
// new leader restarts every session's timeout when it takes over: a
// holder on the old leader is covered by the fencing token there, not by
// the rule.
//
// Reads are served by the server the client is connected to; the recipe
// stays safe because a session sees its own writes and all the writes
// that came before them. The request's TTL is not used.
//
// The client, github.com/go-zookeeper/zk v1.0.4 (its newest release), has a
// data race of its own (samuel/go-zookeeper#260): it stores the zxid of
// each reply in a field that it reads, with no lock between the two, to
// set a session's watches again after a reconnection. The driver keeps
// clear of it: the connection it gives the client records the newest zxid
// itself and hands the client every reply with a zxid of 0, which the
// client does not store; it then writes the zxid into the two requests
// that carry it, the handshake (so that a session reconnects only to a
// server that has seen what it saw) and SetWatches (so that the server
// reports the changes since then). TestReconnectResendsWatches (20
// connection drops with a waiter's watch set, a lock held and requests in
// flight) reports the client's race under -race when the replies' zxid is
// passed on; TestReconnectSendsZxid checks that the handshake carries it.
package zklock
