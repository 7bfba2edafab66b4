package etcdlock

import (
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// SetHooks installs functions the driver calls when a waiter starts
// watching a key, sees a watched key deleted, or queues again after losing
// its key or session. Call it before the driver is used.
func SetHooks(d *Driver, watch, wake func(name, key string), requeue func(name string)) {
	d.hooks = &testHooks{watch: watch, wake: wake, requeue: requeue}
}

// SessionLease returns the lease of the driver's live session for ttl, or
// 0 when there is none.
func SessionLease(d *Driver, ttl time.Duration) clientv3.LeaseID {
	d.mu.Lock()
	defer d.mu.Unlock()
	if sl := d.slots[leaseSeconds(ttl)]; sl != nil && sl.cur != nil {
		return sl.cur.id
	}
	return 0
}
