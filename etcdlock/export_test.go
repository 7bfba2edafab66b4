package etcdlock

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// SetHooks installs functions the driver calls when a waiter starts
// watching a key, sees a watched key deleted, or queues again after losing
// its key or session. Call it before the driver is used.
func SetHooks(d *Driver, watch, wake func(name, key string), requeue func(name string)) {
	h := &d.hooks
	h.watch, h.wake, h.requeue = watch, wake, requeue
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

// SetKeepAliveHook installs f, which each session's goroutine calls before
// every keep-alive with the driver's context (which ends at Close): a test
// that blocks in f stops both the keep-alives and that goroutine, as a
// paused process would. Call it before the driver is used.
func SetKeepAliveHook(d *Driver, f func(ctx context.Context)) {
	d.hooks.keepAlive = f
}
