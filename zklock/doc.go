// Package zklock is dlock's ZooKeeper backend (scheme zk://), on
// github.com/go-zookeeper/zk. It implements the classic lock recipe: each
// acquisition queues an ephemeral sequential znode, the first in line
// holds the lock, and every waiter watches only the node just before its
// own.
//
// # URL
//
//	zk://host:port[,host:port...]/prefix?session_timeout=10s
//
// for example
//
//	zk://10.0.0.1:2181,10.0.0.2:2181,10.0.0.3:2181/myapp/locks?session_timeout=5s
//
// The host part lists the ensemble's servers (a server without a port
// uses DefaultPort, 2181). The path is the prefix, the znode under which
// locks live (default DefaultPrefix, "/dlock"). Parameters:
//
//	session_timeout  the session timeout to ask for (default 10s, at least
//	                 100ms); the server clamps it to its own bounds
//
// besides dlock's shared ones (ttl, renew), which the ZooKeeper backend
// accepts but does not need: a lock lives as long as its session, not for
// a TTL. An unknown parameter is an error naming it. In code, use New or
// NewDriver with Options instead.
//
// # Layout
//
// The lock called "orders/42" is the znode <prefix>/orders/42; name
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
// # Fencing token
//
// A lease's token is its lock node's czxid, the zxid of the transaction
// that created it. Zxids are global and strictly increasing across the
// ensemble, leader changes included (the leader's epoch is their high 32
// bits), so tokens strictly increase per name, and across names too, even
// after a name's znode was removed and created again.
//
// # Sessions and loss
//
// A Driver has one ZooKeeper session at a time, shared by its locks. A
// lock is held as long as its node exists and its session lives: Grant
// Expires is zero, nothing is renewed, and Lease.Refresh only checks that
// the node still exists. The lease's Done closes when the node disappears
// (deleted by an operator or another client: noticed through a watch on
// the node, set once the lock has been held for 25ms) or at once when the
// session ends.
//
// When the connection to the ensemble is lost, the session is SUSPENDED:
// the client reconnects, to any server of the ensemble, and while it
// reconnects within the session timeout the session and its locks live on;
// leases stay held and queued waiters keep their place. The session is
// LOST when the server reports it expired, or when the driver has heard
// nothing from the ensemble for nine tenths of the granted session
// timeout, counted from the sending of the last request the ensemble
// answered: the ensemble cannot expire the session earlier than that, so
// the holder learns of the loss before another client can get its lock.
// The driver then closes that session for good (so that it cannot come
// back with its locks after all), its leases end lost, and the next call
// opens a new session. A waiter whose session was lost queues again, at the
// back, on the new session.
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
// loses the lock and may learn of it only when it resumes: pass the
// fencing token to the resource.
//
// The driver's count of the session timeout relies on the server it talks
// to being in touch with the leader. A follower cut off from the leader
// keeps answering its clients for up to syncLimit × tickTime (10s with
// the defaults) before it drops them, while the leader, no longer told
// about those clients, may expire their sessions: a holder connected to
// such a follower can learn of its loss up to that much after the lock was
// given to another client. The fencing token covers that window too.
//
// Reads are served by the server the client is connected to; the recipe
// stays safe because a session sees its own writes and all the writes
// that came before them. The request's TTL is not used.
package zklock
