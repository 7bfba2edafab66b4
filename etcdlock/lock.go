package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/dlockgo/dlock/driver"
)

// errRequeue means the acquisition's key or session went while it was
// queued or granted: it starts over with a live session, never reporting
// a lock on a dead lease.
var errRequeue = errors.New("etcdlock: the waiter's key or session is gone")

// tryAttempts bounds TryLock's attempts when its session turns out dead.
const tryAttempts = 3

// abandonTimeout bounds the deletion of an abandoned acquisition's key; a
// deletion that fails is retried at the session's next keep-alive.
const abandonTimeout = 500 * time.Millisecond

// TryLock implements driver.Driver in one transaction: it puts the
// caller's key, attached to the session's lease, only if no key exists
// under the name; otherwise it returns a *driver.HeldError (Remaining 0: a
// held lock lasts as long as its holder's session).
func (d *Driver) TryLock(ctx context.Context, r driver.Request) (driver.Grant, error) {
	return d.acquire(ctx, r, false)
}

// Lock implements driver.Waiter. One transaction puts the caller's key,
// which holds the lock when no other key is under the name; otherwise
// Lock watches only the deletion of the key just before it (see
// docs/ETCD.md, How a lock works). A waiter whose key or session is gone
// queues again with a live session. When ctx ends, Lock deletes its key
// before returning ctx's error.
func (d *Driver) Lock(ctx context.Context, r driver.Request) (driver.Grant, error) {
	return d.acquire(ctx, r, true)
}

func (d *Driver) acquire(ctx context.Context, r driver.Request, wait bool) (driver.Grant, error) {
	q, err := d.resolve(r)
	if err != nil {
		return driver.Grant{}, err
	}
	var lastErr error
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			if !wait && attempt >= tryAttempts {
				return driver.Grant{}, lastErr
			}
			if err := pause(ctx, d.ctx, attempt); err != nil {
				return driver.Grant{}, d.stopErr(ctx, lastErr)
			}
		}
		s, err := d.session(ctx, q.secs)
		if err == nil {
			k, ok := d.take(s, &q)
			if !ok {
				err = fmt.Errorf("%w: the session ended", errRequeue)
			} else {
				var g driver.Grant
				if g, err = d.attempt(ctx, s, &q, k, wait); err == nil {
					return g, nil
				}
			}
		}
		lastErr = err
		switch {
		case errors.Is(err, errRequeue):
			if f := d.hooks.requeue; f != nil {
				f(q.Name)
			}
		case ctx.Err() != nil || d.ctx.Err() != nil:
			return driver.Grant{}, d.stopErr(ctx, err)
		case !wait || !transient(ctx, err):
			return driver.Grant{}, err
		}
	}
}

// stopErr is the error of an acquisition stopped by its context or by
// Close, with the last failure as a cause.
func (d *Driver) stopErr(ctx context.Context, cause error) error {
	err := ctx.Err()
	if err == nil {
		err = driver.ErrClosed
	}
	if cause == nil || errors.Is(cause, err) {
		return err
	}
	return errors.Join(err, cause)
}

// attempt makes one acquisition with session s: the transaction, then,
// for Lock, the wait.
func (d *Driver) attempt(ctx context.Context, s *session, q *lockReq, k keys, wait bool) (driver.Grant, error) {
	// TryLock of a mutex, a side of a readers-writer lock or an election
	// puts its key only if no key bars it; etcd's comparisons cannot count
	// keys, so TryLock on a full semaphore writes its key and deletes it.
	cond := !wait && q.Mode != driver.Permit
	rctx, cancel := d.req(ctx)
	var resp *clientv3.TxnResponse
	var err error
	if cond {
		resp, err = d.c.Txn(rctx).If(clientv3.Compare(clientv3.CreateRevision(q.block), "=", 0).WithPrefix()).
			Then(clientv3.OpPut(k.key, q.value, clientv3.WithLease(s.id))).Commit()
	} else {
		// No comparison over the queue nor sorted read of it: etcd's apply
		// loop, which serves one write at a time, would read every key of
		// the range, O(queue length). A count reads etcd's index only;
		// wait's first check reads the key to wait for, off that loop.
		resp, err = d.c.Txn(rctx).Then(
			clientv3.OpGet(q.block, clientv3.WithPrefix(), clientv3.WithCountOnly()),
			clientv3.OpPut(k.key, q.value, clientv3.WithLease(s.id), clientv3.WithPrevKV())).Commit()
	}
	cancel()
	if err != nil {
		return driver.Grant{}, d.txnErr(ctx, s, k, q, err)
	}
	rev := resp.Header.Revision
	if cond {
		if resp.Succeeded {
			return d.grant(s, q, k, rev, uint64(rev))
		}
		d.free(s, k.slot) // nothing was written
		return driver.Grant{}, &driver.HeldError{Name: q.Name}
	}
	limit := int64(1) // how many keys the count may find and still grant
	if q.Mode == driver.Permit {
		limit = int64(q.Limit)
	}
	prev := resp.Responses[1].GetResponsePut().GetPrevKv()
	if prev == nil && resp.Responses[0].GetResponseRange().GetCount() < limit {
		return d.grant(s, q, k, rev, uint64(rev))
	}
	if !wait {
		d.abandon(s, k, false)
		return driver.Grant{}, &driver.HeldError{Name: q.Name}
	}
	myRev := rev
	if prev != nil {
		myRev = prev.CreateRevision // defensive: the slot's key was left, and counted
	}
	return d.wait(ctx, s, q, k, myRev, rev)
}

// txnErr handles a failed acquiring transaction: a lease found gone ends
// the session (the acquisition queues again); otherwise the key, which
// may have been written, is deleted.
func (d *Driver) txnErr(ctx context.Context, s *session, k keys, q *lockReq, err error) error {
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		s.end(fmt.Errorf("%w: lease %x is gone: %w", driver.ErrLost, int64(s.id), err), false)
		return fmt.Errorf("%w: %w", errRequeue, err)
	}
	d.abandon(s, k, true) // the put may have been applied
	if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("etcdlock: acquire %q: no answer within the request timeout %v: %w", q.Name, d.timeout, err)
	}
	return fmt.Errorf("etcdlock: acquire %q: %w", q.Name, err)
}

// grant records the lock, whose key was created at rev, as held and
// returns its grant; if the session ended meanwhile, the key is deleted
// and the acquisition starts over. Every kind is granted here, with the
// lock's check as Grant.Check, so that a lease's Err compares the
// session's deadline with the clock instead of waiting for the session's
// goroutine to notice.
func (d *Driver) grant(s *session, q *lockReq, k keys, rev int64, token uint64) (driver.Grant, error) {
	l := &lock{name: q.Name, owner: q.Owner, mode: q.Mode, k: k, rev: rev, token: token, s: s}
	d.mu.Lock()
	if !s.ended && !d.closed {
		d.locks[q.Owner] = l
		s.locks[l] = struct{}{}
		d.mu.Unlock()
		return driver.Grant{Token: token, OnLost: l.notice.Set, Check: l.check}, nil
	}
	closed := d.closed
	d.mu.Unlock()
	d.abandon(s, k, false)
	if closed {
		return driver.Grant{}, driver.ErrClosed
	}
	return driver.Grant{}, fmt.Errorf("%w: session ended as the lock was granted", errRequeue)
}

// abandon deletes the key of an acquisition that gave up, with no
// condition: its slot is reserved to it. When the deletion fails, or a
// put whose outcome is unknown might land after it, it is repeated at the
// session's next keep-alive, and the slot stays taken until then.
func (d *Driver) abandon(s *session, k keys, unknown bool) {
	ctx, cancel := context.WithTimeout(context.Background(), abandonTimeout)
	_, err := d.c.Delete(ctx, k.key)
	cancel()
	if err != nil || unknown {
		d.orphan(s, k)
		return
	}
	d.free(s, k.slot)
}

// take reserves the session's lowest free key slot for q's name and
// mode; false when the session has ended.
func (d *Driver) take(s *session, q *lockReq) (keys, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if s.ended {
		return keys{}, false
	}
	sk := slotKey{mode: q.slot, name: q.Name}
	for {
		if _, used := s.used[sk]; !used {
			break
		}
		sk.n++
	}
	s.used[sk] = struct{}{}
	k := keys{key: q.queue + q.kind + s.hex, slot: sk}
	if sk.n > 0 {
		k.key += "." + strconv.Itoa(sk.n)
	}
	return k, true
}

// free returns a key slot whose key is known gone, with no deletion of it
// in flight, so that no later use of the key can be deleted by mistake.
func (d *Driver) free(s *session, sk slotKey) {
	d.mu.Lock()
	if !s.ended {
		delete(s.used, sk)
	}
	d.mu.Unlock()
}

// orphan queues k for deletion at the session's next keep-alive; its slot
// stays taken until then.
func (d *Driver) orphan(s *session, k keys) {
	d.mu.Lock()
	if !s.ended {
		s.orphans = append(s.orphans, k)
	}
	d.mu.Unlock()
}

// lose drops a held lock whose key is gone and signals its loss.
func (d *Driver) lose(l *lock) {
	d.mu.Lock()
	if d.locks[l.owner] != l {
		d.mu.Unlock()
		return
	}
	delete(d.locks, l.owner)
	delete(l.s.locks, l)
	l.gone.Store(true)
	if !l.unlocking && !l.s.ended {
		delete(l.s.used, l.k.slot) // else Unlock frees it
	}
	d.mu.Unlock()
	l.notice.Signal()
}

// forget drops a lock released by its holder, without signalling loss.
func (d *Driver) forget(l *lock) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.locks[l.owner] == l {
		delete(d.locks, l.owner)
	}
	if l.s.locks != nil {
		delete(l.s.locks, l)
	}
}

// Unlock implements driver.Driver: it deletes the caller's key, with no
// condition: the key's slot is reserved to this lock until the deletion
// is done, so the key, if it exists, is this lock's. Transient failures
// are retried until ctx ends; if the deletion still fails, the key is
// deleted at the session's next keep-alive rather than live as long as
// the session.
func (d *Driver) Unlock(ctx context.Context, r driver.Request) error {
	l := d.held(r, true)
	if l == nil {
		return fmt.Errorf("%w: %q", driver.ErrNotHeld, r.Name)
	}
	// A failed attempt may have deleted the key. Once a later attempt is
	// applied, the earlier one was applied before it or never will be (Raft
	// applies in log order), so the slot can be freed then.
	maybeDone := false
	for attempt := 1; ; attempt++ {
		rctx, cancel := d.req(ctx)
		resp, err := d.c.Delete(rctx, l.k.key)
		cancel()
		if err == nil {
			d.forget(l)
			d.free(l.s, l.k.slot)
			if resp.Deleted == 0 && !maybeDone {
				return fmt.Errorf("%w: %q: its key is gone", driver.ErrNotHeld, r.Name)
			}
			return nil
		}
		maybeDone = true
		if transient(ctx, err) && pause(ctx, context.Background(), attempt) == nil {
			continue
		}
		d.forget(l)
		d.orphan(l.s, l.k)
		return fmt.Errorf("etcdlock: unlock %q (deleted in the background): %w", r.Name, err)
	}
}

// Renew implements driver.Driver. The driver keeps the lease alive, so
// Renew only checks, in one read, that the caller's key still exists:
// it returns the zero time (no expiry of its own), or an error wrapping
// driver.ErrNotHeld when the key is gone.
func (d *Driver) Renew(ctx context.Context, r driver.Request) (time.Time, error) {
	l := d.held(r, false)
	if l == nil {
		return time.Time{}, fmt.Errorf("%w: %q", driver.ErrNotHeld, r.Name)
	}
	rctx, cancel := d.req(ctx)
	resp, err := d.c.Txn(rctx).If(clientv3.Compare(clientv3.CreateRevision(l.k.key), "=", l.rev)).Commit()
	cancel()
	if err != nil {
		return time.Time{}, fmt.Errorf("etcdlock: renew %q: %w", r.Name, err)
	}
	if !resp.Succeeded {
		d.lose(l)
		return time.Time{}, fmt.Errorf("%w: %q: its key is gone", driver.ErrNotHeld, r.Name)
	}
	return time.Time{}, nil
}

// held returns the lock r holds on this driver, or nil. With unlock, the
// caller is Unlock, which from now on frees the lock's slot.
func (d *Driver) held(r driver.Request, unlock bool) *lock {
	d.mu.Lock()
	defer d.mu.Unlock()
	if l := d.locks[r.Owner]; l != nil && l.name == r.Name && l.mode == r.Mode {
		l.unlocking = l.unlocking || unlock
		return l
	}
	return nil
}

// transient reports whether a request that failed with err is worth trying
// again while ctx, the caller's context, lasts: the cluster could not serve
// it for now, or it ran past RequestTimeout.
func transient(ctx context.Context, err error) bool {
	return ctx.Err() == nil && (retryable(err) || timedOut(err))
}

// timedOut reports whether err is a request's deadline passing, on the
// client or on the member: a linearizable read still waiting there at
// the deadline fails with the context's error, which reaches the client
// as code Unknown, often before the client's own timer fires.
func timedOut(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	s, ok := status.FromError(err)
	return ok && (s.Code() == codes.DeadlineExceeded || s.Message() == context.DeadlineExceeded.Error())
}

// retryable reports whether err says the cluster could not serve the
// request for now (no leader, a member down, a timeout inside etcd).
func retryable(err error) bool {
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		return ee.Code() == codes.Unavailable
	}
	return status.Code(err) == codes.Unavailable
}

// pause sleeps before retry number attempt: exponential from 5ms to
// 500ms, with jitter. It returns early with an error when ctx or stop
// ends.
func pause(ctx context.Context, stop context.Context, attempt int) error {
	d := 5 * time.Millisecond
	for i := 1; i < attempt && d < 500*time.Millisecond; i++ {
		d *= 2
	}
	d = min(d, 500*time.Millisecond)
	d = d/2 + rand.N(d/2+1)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-stop.Done():
		return driver.ErrClosed
	}
}
