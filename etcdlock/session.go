package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlockgo/dlock/driver"
)

// A session is one etcd lease that the driver keeps alive and attaches the
// keys of every acquisition with the same TTL to, so that a lock needs no
// lease grant of its own. It ends, losing every lock attached to it, when
// a keep-alive finds the lease gone or none succeeds before the lease may
// have expired on the server.
type session struct {
	d    *Driver
	id   clientv3.LeaseID
	hex  string        // id in hex: the last segment of the session's keys
	ttl  time.Duration // as granted: etcd may raise a short TTL to its minimum
	slot *slot
	done chan struct{} // closed when the session ends

	// Guarded by d.mu.
	ended   bool
	cause   error // why it ended
	locks   map[*lock]struct{}
	used    map[slotKey]struct{} // key slots in use or awaiting deletion
	orphans []keys               // keys to delete at the next keep-alive

	// Owned by run.
	validUntil time.Time // the lease certainly lives until then
	lastSent   time.Time // when the last successful keep-alive was sent

	// lossAt is when the session is to be declared lost (validUntil less
	// lossMargin, in nanoseconds since d.base on the monotonic clock), or
	// expired. It is one atomic word because Grant.Check reads it at every
	// Lease.Err; keepAlive moves it only by compare-and-swap, so that a
	// keep-alive answered just after a Check saw the deadline pass leaves
	// the session lost, as that Check said, rather than "held" again.
	lossAt atomic.Int64
	// endErr is cause, published for Check, which must not take d.mu.
	endErr atomic.Pointer[error]
}

// leaseSeconds is a lock TTL as an etcd lease TTL: whole seconds, rounded
// up, at least one.
func leaseSeconds(ttl time.Duration) int64 {
	return max(1, int64((ttl+time.Second-1)/time.Second))
}

// lossMargin is how long before the lease may expire on the server that
// the driver declares the session lost, when no keep-alive succeeded: the
// holder must learn of the loss before another client can get the lock.
func lossMargin(ttl time.Duration) time.Duration {
	return ttl/50 + 5*time.Millisecond
}

// keepAliveTimeout bounds one keep-alive attempt, so that a member that
// does not answer is given up in time to try another.
func keepAliveTimeout(ttl time.Duration) time.Duration {
	return min(max(ttl/4, 100*time.Millisecond), 2*time.Second)
}

// retryDelay is the pause after a failed call before the next attempt.
func retryDelay(ttl time.Duration) time.Duration {
	return min(max(ttl/20, 20*time.Millisecond), 500*time.Millisecond)
}

// session returns the live session whose lease TTL is secs, granting a
// new lease when there is none.
func (d *Driver) session(ctx context.Context, secs int64) (*session, error) {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil, driver.ErrClosed
	}
	sl := d.slots[secs]
	if sl == nil {
		sl = &slot{}
		d.slots[secs] = sl
	}
	s := sl.cur
	d.mu.Unlock()
	if s = d.live(s); s != nil {
		return s, nil
	}

	sl.grant.Lock()
	defer sl.grant.Unlock()
	d.mu.Lock()
	s = sl.cur
	d.mu.Unlock()
	if s = d.live(s); s != nil {
		return s, nil // another caller granted it meanwhile
	}
	sent := time.Now()
	rctx, cancel := d.req(ctx)
	resp, err := d.c.Grant(rctx, secs)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("etcdlock: grant a %ds lease: %w", secs, err)
	}
	ttlGranted := time.Duration(resp.TTL) * time.Second
	s = &session{
		d:          d,
		id:         resp.ID,
		hex:        strconv.FormatInt(int64(resp.ID), 16),
		ttl:        ttlGranted,
		slot:       sl,
		done:       make(chan struct{}),
		locks:      map[*lock]struct{}{},
		used:       map[slotKey]struct{}{},
		validUntil: sent.Add(ttlGranted),
		lastSent:   sent,
	}
	s.lossAt.Store(d.mono(s.validUntil.Add(-lossMargin(ttlGranted))))
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		cctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
		_, _ = d.c.Revoke(cctx, s.id)
		cancel()
		return nil, driver.ErrClosed
	}
	sl.cur = s
	d.wg.Add(1)
	d.mu.Unlock()
	go s.run()
	return s, nil
}

// live returns s, or nil when there is no session or its validity is
// over although its goroutine has not ended it yet (a process resumed
// after a pause), so that a lock granted on it would be lost at its first
// Err. Such a session is ended here, so that the caller grants a new one,
// without revoking its lease, which expires within the loss margin anyway.
func (d *Driver) live(s *session) *session {
	if s == nil {
		return nil
	}
	if d.mono(time.Now()) < s.lossAt.Load() {
		return s
	}
	s.end(fmt.Errorf("%w: lease %x: no keep-alive was answered before its validity ended", driver.ErrLost, int64(s.id)), false)
	return nil
}

// run keeps the lease alive about every third of its TTL and, after each
// keep-alive, checks that the keys of the session's locks still exist.
func (s *session) run() {
	defer s.d.wg.Done()
	d := s.d
	timer := time.NewTimer(time.Until(s.lastSent.Add(s.ttl / 3)))
	defer timer.Stop()
	for {
		select {
		case <-d.ctx.Done():
			return // Close ends and revokes the session
		case <-s.done:
			return
		case <-timer.C:
		}
		if f := d.hooks.keepAlive; f != nil {
			f(d.ctx)
		}
		if err := s.keepAlive(); err != nil {
			if d.ctx.Err() == nil {
				s.end(err, !errors.Is(err, rpctypes.ErrLeaseNotFound))
			}
			return
		}
		s.verify()
		timer.Reset(time.Until(s.lastSent.Add(s.ttl / 3)))
	}
}

// keepAlive renews the lease, retrying until the lease may have expired,
// less lossMargin. The new validity counts from when the successful
// request was sent, never from its reply.
func (s *session) keepAlive() error {
	d := s.d
	margin := lossMargin(s.ttl)
	var lastErr error
	for {
		now := time.Now()
		lossAt := s.validUntil.Add(-margin)
		if !now.Before(lossAt) {
			return fmt.Errorf("%w: no keep-alive of lease %x succeeded before it could expire: %w",
				driver.ErrLost, int64(s.id), lastErr)
		}
		deadline := now.Add(keepAliveTimeout(s.ttl))
		if lossAt.Before(deadline) {
			deadline = lossAt
		}
		ctx, cancel := context.WithDeadline(d.ctx, deadline)
		resp, err := d.c.KeepAliveOnce(ctx, s.id)
		cancel()
		if err == nil {
			validUntil := now.Add(time.Duration(resp.TTL) * time.Second)
			if !s.lossAt.CompareAndSwap(d.mono(lossAt), d.mono(validUntil.Add(-margin))) {
				return fmt.Errorf("%w: the validity of lease %x ran out, as a lease's Err saw, before its keep-alive was answered",
					driver.ErrLost, int64(s.id))
			}
			s.validUntil = validUntil
			s.lastSent = now
			return nil
		}
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return fmt.Errorf("%w: lease %x expired or was revoked: %w", driver.ErrLost, int64(s.id), err)
		}
		if d.ctx.Err() != nil {
			return driver.ErrClosed
		}
		lastErr = err
		t := time.NewTimer(min(retryDelay(s.ttl), time.Until(lossAt)))
		select {
		case <-t.C:
		case <-d.ctx.Done():
		}
		t.Stop()
	}
}

// maxTxnOps is etcd's default limit on the operations of one transaction.
const maxTxnOps = 128

// verify checks, in one transaction per 128 locks, that every lock's key
// still exists with its create revision (a lock whose key was deleted
// behind the holder's back is lost), then deletes the keys of abandoned
// acquisitions whose deletion failed or may have raced their creation.
func (s *session) verify() {
	d := s.d
	d.mu.Lock()
	if s.ended {
		d.mu.Unlock()
		return
	}
	held := slices.Collect(maps.Keys(s.locks))
	orphans := s.orphans
	s.orphans = nil
	d.mu.Unlock()

	ctx, cancel := context.WithTimeout(d.ctx, s.ttl/3)
	defer cancel()
	for len(held) > 0 {
		chunk := held[:min(len(held), maxTxnOps)]
		held = held[len(chunk):]
		cmps := make([]clientv3.Cmp, len(chunk))
		gets := make([]clientv3.Op, len(chunk))
		for i, l := range chunk {
			cmps[i] = clientv3.Compare(clientv3.CreateRevision(l.k.key), "=", l.rev)
			gets[i] = clientv3.OpGet(l.k.key, clientv3.WithKeysOnly())
		}
		resp, err := d.c.Txn(ctx).If(cmps...).Else(gets...).Commit()
		if err != nil {
			break // checked again at the next keep-alive
		}
		if resp.Succeeded {
			continue
		}
		for i, r := range resp.Responses {
			kvs := r.GetResponseRange().GetKvs()
			if len(kvs) == 0 || kvs[0].CreateRevision != chunk[i].rev {
				d.lose(chunk[i])
			}
		}
	}
	for i, k := range orphans {
		if _, err := d.c.Delete(ctx, k.key); err != nil {
			d.mu.Lock()
			if !s.ended {
				s.orphans = append(s.orphans, orphans[i:]...)
			}
			d.mu.Unlock()
			return
		}
		d.free(s, k.slot)
	}
}

// end ends the session once: every lock attached to it is lost, and the
// next acquisition grants a new lease. With revoke, the lease is revoked
// (best effort), so that keys left on a reachable server go at once.
func (s *session) end(cause error, revoke bool) {
	d := s.d
	d.mu.Lock()
	if s.ended {
		d.mu.Unlock()
		return
	}
	s.ended = true
	s.cause = cause
	s.endErr.Store(&cause) // before the locks are marked gone
	close(s.done)
	lost := make([]*lock, 0, len(s.locks))
	for l := range s.locks {
		l.gone.Store(true)
		lost = append(lost, l)
		if d.locks[l.owner] == l {
			delete(d.locks, l.owner)
		}
	}
	s.locks = nil
	s.used = nil
	s.orphans = nil
	if s.slot.cur == s {
		s.slot.cur = nil
	}
	d.mu.Unlock()
	for _, l := range lost {
		l.notice.Signal()
	}
	if revoke {
		ctx, cancel := context.WithTimeout(context.Background(), min(s.ttl, closeTimeout))
		_, _ = d.c.Revoke(ctx, s.id)
		cancel()
	}
}

// endCause returns why the session ended.
func (s *session) endCause() error {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	return s.cause
}

// expired is lossAt once a Check found the session's validity over: below
// every clock reading, so that every later Check fails too.
const expired = math.MinInt64

// mono returns t as lossAt counts it: nanoseconds since d.base, on the
// monotonic clock when t carries a reading of it (time.Now does).
func (d *Driver) mono(t time.Time) int64 { return int64(t.Sub(d.base)) }

// check is a lock's Grant.Check: the lock may be held while now is before
// the session's lossAt and it has not been signalled lost. A Check that
// finds lossAt passed marks the session expired, so that every later
// Check fails and keepAlive gives the session up rather than extend it.
// It takes no lock and, in the nil path, allocates nothing. It reads the
// deadline run acts on without waiting for run's goroutine to be
// scheduled (a holder resumed after a SIGSTOP longer than the TTL gets an
// error at its first look: its monotonic clock ran on meanwhile).
func (l *lock) check(now time.Time) error {
	s := l.s
	for {
		at := s.lossAt.Load()
		if s.d.mono(now) < at {
			if l.gone.Load() {
				return l.lostErr()
			}
			return nil
		}
		if at == expired || s.lossAt.CompareAndSwap(at, expired) {
			return fmt.Errorf("%w: lease %x: no keep-alive was answered in time: its validity (%v from the last answered keep-alive's sending, less a margin of %v) is over",
				driver.ErrLost, int64(s.id), s.ttl, lossMargin(s.ttl))
		}
		// keepAlive extended the deadline meanwhile: compare again.
	}
}

// lostErr says why l, marked gone, was lost: its session ended, or its
// key was found deleted.
func (l *lock) lostErr() error {
	if p := l.s.endErr.Load(); p != nil {
		return *p
	}
	return fmt.Errorf("%w: %q: its key was deleted", driver.ErrLost, l.name)
}
