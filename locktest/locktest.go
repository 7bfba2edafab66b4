package locktest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
)

// DefaultTTL is the lock TTL the suite uses when Harness.TTL is zero.
const DefaultTTL = 500 * time.Millisecond

// Harness connects the suite to one backend.
type Harness struct {
	// NewLocker returns a new, independent client of the backend under
	// test, as another process would open, with opts applied. The suite
	// closes it. Required.
	NewLocker func(t *testing.T, opts ...dlock.Option) *dlock.Locker

	// TakeAway removes the lock called name on the store behind its
	// holder's back, as an operator or a failover would. Required.
	TakeAway func(t *testing.T, name string)

	// TTL is the short lock TTL the suite uses; DefaultTTL when zero.
	TTL time.Duration

	// NewName is how much longer than a round trip the first acquisition
	// of a name may take (an object store waits a grain of its clock):
	// each property's time limit grows by 50 of it.
	NewName time.Duration

	// Crash, if set, makes the client l stop as a crashed process would:
	// its session or connection dies without releasing anything. Set by
	// backends whose locks live with a session, connection or process
	// (ZooKeeper, etcd, PostgreSQL, MySQL, file): ExpiresWithoutRenewal
	// then crashes the holder instead of turning its renewal off.
	Crash func(t *testing.T, l *dlock.Locker)

	// ElectionIsMutex says that the backend keeps the election and the
	// mutex of one name in one queue, as etcd's concurrency package does
	// (etcdlock's LayoutConcurrency: `etcdctl lock x` and `etcdctl elect
	// x` are one lock): a campaign then must wait while the mutex of its
	// name is held, where otherwise it must not.
	ElectionIsMutex bool

	// WriteIsMutex says that the backend keeps the write side of the
	// readers-writer lock and the mutex of one name in one queue, as
	// kazoo's Lock and WriteLock on one path are (zklock's LayoutKazoo):
	// the mutex then must be held while a writer holds, else free.
	WriteIsMutex bool
}

// Run runs every property of the suite as a subtest of t.
func Run(t *testing.T, h Harness) {
	if h.NewLocker == nil || h.TakeAway == nil {
		t.Fatal("locktest: Harness.NewLocker and Harness.TakeAway are required")
	}
	if h.TTL == 0 {
		h.TTL = DefaultTTL
	}
	s := &suite{h: h, run: RandomHex(4)}
	for _, p := range []struct {
		name  string
		limit time.Duration
		fn    func(*testing.T, context.Context, string)
	}{
		{"InvalidName", 20 * time.Second, s.invalidName},
		{"TryAcquireWhileHeld", 20 * time.Second, s.tryWhileHeld},
		{"AcquireWaitsForRelease", 30 * time.Second, s.waitsForRelease},
		{"CancelDuringWait", 30 * time.Second, s.cancelDuringWait},
		{"DoneContextNeverAcquires", 20 * time.Second, s.doneContext},
		{"MutualExclusion", 120 * time.Second, s.mutualExclusion},
		{"TokensIncrease", 60 * time.Second, s.tokensIncrease},
		{"RenewalKeepsLock", 30 * time.Second, s.renewalKeepsLock},
		{"ExpiresWithoutRenewal", 30 * time.Second, s.expiresWithoutRenewal},
		{"LostWhenTakenAway", 30 * time.Second, s.lostWhenTakenAway},
		{"ReleaseByNonOwner", 30 * time.Second, s.releaseByNonOwner},
		{"DoubleRelease", 20 * time.Second, s.doubleRelease},
		{"HeldLocksCostNoGoroutine", 30 * time.Second, s.heldNoGoroutine},
		{"ResumeByHandle", 60 * time.Second, s.resumeByHandle},
		{"InspectListsHolders", 30 * time.Second, s.inspectListsHolders},
		{"RWReadersShareWritersExclude", 60 * time.Second, s.rwShareExclude},
		{"RWTryAcquire", 30 * time.Second, s.rwTry},
		{"RWWriterNotStarved", 30 * time.Second, s.rwWriterNotStarved},
		{"RWTokens", 30 * time.Second, s.rwTokens},
		{"SemaphoreLimit", 60 * time.Second, s.semaphoreLimit},
		{"SemaphoreTryWhenFull", 30 * time.Second, s.semaphoreTryWhenFull},
		{"SemaphoreHolderStops", 30 * time.Second, s.semaphoreHolderStops},
		{"MultiOppositeOrders", 120 * time.Second, s.multiOppositeOrders},
		{"MultiAllOrNothing", 30 * time.Second, s.multiAllOrNothing},
		{"MultiLostPart", 30 * time.Second, s.multiLostPart},
		{"ElectionOneLeader", 60 * time.Second, s.electionOneLeader},
		{"ElectionTryCampaign", 30 * time.Second, s.electionTryCampaign},
		{"ElectionObserve", 60 * time.Second, s.electionObserve},
	} {
		t.Run(p.name, func(t *testing.T) {
			limit := p.limit + 50*s.h.NewName
			ctx, cancel := context.WithTimeout(context.Background(), limit)
			defer cancel()
			stop := context.AfterFunc(ctx, func() {
				if errors.Is(ctx.Err(), context.DeadlineExceeded) {
					t.Errorf("%s: did not finish within %v", p.name, limit)
				}
			})
			defer stop()
			p.fn(t, ctx, fmt.Sprintf("locktest/%s/%s", s.run, p.name))
		})
	}
}

type suite struct {
	h   Harness
	run string
}

// holdTTL is the TTL of a holder whose release a property waits for: with
// renewals 20 s apart, such a lock cannot expire within the 30 s the
// property has, so a waiter that gets it was served by the release, not
// by the TTL running out.
const holdTTL = time.Minute

// lossBound is how long the suite waits for something expected within
// about a TTL — a lost or expired lock noticed, a stopped holder's lock
// granted to another client: ten times that, and 10 s at least. It only
// bounds a hang; how soon it happens is a figure, which the suite logs.
func (s *suite) lossBound() time.Duration { return max(10*s.h.TTL, 10*time.Second) }

// prompt is how long the suite waits for what takes a moment with nothing
// to wait for — a channel closed after a Done, a lease's timer: a hang
// bound.
const prompt = 5 * time.Second

// locker opens a client with the suite's TTL, closed when t ends.
func (s *suite) locker(t *testing.T, opts ...dlock.Option) *dlock.Locker {
	t.Helper()
	l := s.h.NewLocker(t, append([]dlock.Option{dlock.WithTTL(s.h.TTL)}, opts...)...)
	if l == nil {
		t.Fatal("Harness.NewLocker returned nil")
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// lockers opens n clients with s.locker.
func (s *suite) lockers(t *testing.T, n int) []*dlock.Locker {
	t.Helper()
	ls := make([]*dlock.Locker, n)
	for i := range ls {
		ls[i] = s.locker(t)
	}
	return ls
}

// acquire takes name or fails t.
func acquire(t *testing.T, ctx context.Context, l *dlock.Locker, name string, opts ...dlock.Option) *dlock.Lease {
	t.Helper()
	lease, err := l.Acquire(ctx, name, opts...)
	if err != nil {
		t.Fatalf("Acquire(%q): %v", name, err)
	}
	if lease == nil {
		t.Fatalf("Acquire(%q) returned a nil lease and a nil error", name)
	}
	return lease
}

// release releases lease or reports an error.
func release(t *testing.T, ctx context.Context, lease *dlock.Lease) {
	t.Helper()
	if err := lease.Release(ctx); err != nil {
		t.Errorf("Release(%q): %v", lease.Name(), err)
	}
}

// decided calls try again (up to 3 times in all) while a multi-node backend
// answers that too few nodes answered in time to decide (ErrNoQuorum: a
// loaded machine, a first TLS handshake): the checks that use it need a
// decision, held or free.
func decided[T any](try func() (T, error)) (T, error) {
	for i := 0; ; i++ {
		v, err := try()
		if err == nil || !errors.Is(err, dlock.ErrNoQuorum) || i == 2 {
			return v, err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// tryDecided is TryAcquire until decided.
func tryDecided(ctx context.Context, l *dlock.Locker, name string) (*dlock.Lease, error) {
	return decided(func() (*dlock.Lease, error) { return l.TryAcquire(ctx, name) })
}

// mustBeHeld checks, with a fresh client's TryAcquire, that name is held.
func mustBeHeld(t *testing.T, ctx context.Context, l *dlock.Locker, name, when string) {
	t.Helper()
	mustFail(t, ctx, func() (*dlock.Lease, error) { return tryDecided(ctx, l, name) }, fmt.Sprintf("%s: TryAcquire(%q)", when, name))
}

// mustBeFree checks that name can be taken at once, then releases it.
func mustBeFree(t *testing.T, ctx context.Context, l *dlock.Locker, name, when string) {
	t.Helper()
	lease, err := tryDecided(ctx, l, name)
	if err != nil {
		t.Errorf("%s: TryAcquire(%q) = %v; the lock should be free", when, name, err)
		return
	}
	release(t, ctx, lease)
}

// closedWithin waits for done (a lease's or a context's Done) to close, up
// to limit, and reports whether it did.
func closedWithin(done <-chan struct{}, limit time.Duration) bool {
	select {
	case <-done:
		return true
	case <-time.After(limit):
		return false
	}
}

// unsupported reports whether l lacks mode m. When it does, it checks
// that attempt — a call of one of the kind's methods — fails with an
// error matching ErrUnsupported: a backend without a kind must say so.
func unsupported(t *testing.T, ctx context.Context, l *dlock.Locker, m driver.Mode, attempt func() (*dlock.Lease, error)) bool {
	t.Helper()
	if l.Supports(m) {
		return false
	}
	mustFailWith(t, ctx, dlock.ErrUnsupported, attempt, fmt.Sprintf("an attempt at a %s lock on a backend without them", m))
	return true
}
