// Package interop holds dlock's tests against the peers whose lock
// formats its backends speak (docs/INTEROP.md): Apache Curator and kazoo
// on ZooKeeper, etcd's concurrency package and etcdctl, redsync and
// bsm/redislock on Redis. It is a module of its own so that the library
// does not depend on the peers; it has no code but its tests.
package interop
