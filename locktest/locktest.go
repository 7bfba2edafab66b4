package locktest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
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

	// Crash, if set, makes the client l stop as a crashed process would:
	// its session or connection dies without releasing anything. Backends
	// whose locks live as long as a session, connection or process rather
	// than a renewed TTL (ZooKeeper, etcd, PostgreSQL, MySQL, file) set it; the ExpiresWithoutRenewal
	// property then crashes the holder instead of turning its renewal off,
	// and expects another client to get the lock once the store notices.
	Crash func(t *testing.T, l *dlock.Locker)

	// ElectionIsMutex says that the backend keeps the election and the
	// mutex of one name in one queue, as etcd's concurrency package does
	// (etcdlock's LayoutConcurrency: `etcdctl lock x` and `etcdctl elect
	// x` are one lock). The election properties then check that a
	// campaign waits while the mutex of its name is held, where they
	// otherwise check that it does not.
	ElectionIsMutex bool

	// WriteIsMutex says that the backend keeps the write side of the
	// readers-writer lock and the mutex of one name in one queue, as
	// kazoo's Lock and WriteLock on one path are (zklock's LayoutKazoo).
	// The readers-writer properties then check that the mutex is held
	// while a writer holds, where they otherwise check that it is free.
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
			ctx, cancel := context.WithTimeout(context.Background(), p.limit)
			defer cancel()
			stop := context.AfterFunc(ctx, func() {
				if errors.Is(ctx.Err(), context.DeadlineExceeded) {
					t.Errorf("%s: did not finish within %v", p.name, p.limit)
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
	lease, err := tryDecided(ctx, l, name)
	if err == nil {
		_ = lease.Release(ctx)
		t.Errorf("%s: TryAcquire(%q) succeeded; the lock should be held", when, name)
		return
	}
	if !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("%s: TryAcquire(%q) = %v, want an error matching ErrNotAcquired", when, name, err)
	}
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

// waitDone waits for the lease to end, up to limit.
func waitDone(lease *dlock.Lease, limit time.Duration) bool {
	select {
	case <-lease.Done():
		return true
	case <-time.After(limit):
		return false
	}
}

// The helpers every backend's tests use.

// RandomHex returns n random bytes in hex: a name, prefix or owner of a
// test's own on a shared server.
func RandomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Context returns a context that ends after d, or when t ends.
func Context(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// Eventually reads cond every 5 ms until it holds, for at most limit, and
// reports whether it did: a hang bound, not a timing.
func Eventually(limit time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}

// Request is a driver request for the mutex name with ttl and a fresh
// owner, as a Locker makes them.
func Request(name string, ttl time.Duration) driver.Request {
	return driver.Request{Name: name, Owner: RandomHex(16), TTL: ttl}
}

// New returns a Locker over d with opts, closed when t ends; an error
// fails t.
func New(t testing.TB, d driver.Driver, opts ...dlock.Option) *dlock.Locker {
	t.Helper()
	return Opened(t)(dlock.New(d, opts...))
}

// Opened returns what takes a backend constructor's results and returns
// its Locker, closed when t ends; an error fails t:
// locktest.Opened(t)(etcdlock.New(c, o)).
func Opened(t testing.TB) func(*dlock.Locker, error) *dlock.Locker {
	return func(l *dlock.Locker, err error) *dlock.Locker {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		return l
	}
}

// NextLeader receives the next value from an Observe channel, or fails t
// if the channel closes or nothing comes within limit (a hang bound).
func NextLeader(t testing.TB, ch <-chan dlock.LeaderInfo, limit time.Duration) dlock.LeaderInfo {
	t.Helper()
	select {
	case info, ok := <-ch:
		if !ok {
			t.Fatal("the Observe channel closed")
		}
		return info
	case <-time.After(limit):
		t.Fatalf("no leader change within %v", limit)
	}
	return dlock.LeaderInfo{}
}

// OpenFails checks that dlock.Open of url fails with a *dlock.ParamError
// naming param (a Locker it opens nonetheless is closed), and returns the
// error.
func OpenFails(t testing.TB, ctx context.Context, url, param string) error {
	t.Helper()
	l, err := dlock.Open(ctx, url)
	if err == nil {
		_ = l.Close()
	}
	if pe, ok := errors.AsType[*dlock.ParamError](err); !ok || pe.Param != param {
		t.Errorf("Open(%q) = %v, want a *ParamError naming %q", url, err, param)
	}
	return err
}

// GiveUpWaits runs 10 driver-level waits for the mutex name, whose
// contexts end 20 to 110 ms from now, and returns when all have ended.
func GiveUpWaits(ctx context.Context, d driver.Waiter, name string) {
	var wg sync.WaitGroup
	for i := range 10 {
		wg.Go(func() {
			wctx, cancel := context.WithTimeout(ctx, time.Duration(20+10*i)*time.Millisecond)
			defer cancel()
			_, _ = d.Lock(wctx, Request(name, 10*time.Second))
		})
	}
	wg.Wait()
}

// TakeTurn is turn i of a run through lockers: name taken on
// lockers[i%len(lockers)] by Acquire when i is even, TryAcquire when odd;
// an error fails t.
func TakeTurn(t testing.TB, ctx context.Context, lockers []*dlock.Locker, i int, name string) *dlock.Lease {
	t.Helper()
	take := lockers[i%len(lockers)].Acquire
	if i%2 == 1 {
		take = lockers[i%len(lockers)].TryAcquire
	}
	lease, err := take(ctx, name)
	if err != nil {
		t.Fatalf("acquisition %d of %q: %v", i, name, err)
	}
	return lease
}
