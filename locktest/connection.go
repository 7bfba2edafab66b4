package locktest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/internal/testenv"
)

// ServerKill is the check, for a backend whose locks live with a
// connection (PostgreSQL, MySQL), that a lease learns of a server-side
// kill of that connection by the connection itself, not by a later
// renewal or keep-alive: runs times, it acquires the mutex name with l
// with a TTL of an hour, calls kill (which ends the holder's session on
// the server and returns the instant its statement returned), and waits
// for Done; Err must then match dlock.ErrLost. l's keep-alives must be an
// hour apart too, so that only the watch of the connection can close Done
// within the hang bound (ten times bound, 5 s at least). bound is how
// soon Done is expected to close: p50, p99 and max are logged against it,
// figures a loaded machine may stretch.
func ServerKill(t *testing.T, l *dlock.Locker, name string, runs int, bound time.Duration,
	kill func(t *testing.T, lease *dlock.Lease) time.Time) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	hang := max(10*bound, 5*time.Second)
	took := make([]time.Duration, 0, runs)
	for i := range runs {
		// Acquire, not TryAcquire: the last run's session may still be
		// letting its locks go.
		lease := acquire(t, ctx, l, name, dlock.WithTTL(time.Hour))
		killed := kill(t, lease)
		if !closedWithin(lease.Done(), hang) {
			t.Fatalf("run %d: Done not closed %v after the holder's connection was killed, with renewals 20 minutes apart", i, hang)
		}
		took = append(took, time.Since(killed))
		if err := lease.Err(); !errors.Is(err, dlock.ErrLost) {
			t.Errorf("run %d: Err after the kill = %v, want ErrLost", i, err)
		}
	}
	t.Logf("Done closed after the kill returned: %s; expected within %v", percentiles(took), bound)
}

// percentiles sorts took and describes it: p50, p99, max and count.
func percentiles(took []time.Duration) string {
	slices.Sort(took)
	return fmt.Sprintf("p50 %v, p99 %v, max %v (%d runs)", took[len(took)/2], took[len(took)*99/100], took[len(took)-1], len(took))
}

// A DriverKill is the body of the driver-level tests of a backend whose
// locks live with a server connection (PostgreSQL, MySQL): a server-side
// kill of the holding connection is seen at once by the watch of its
// socket (SeenAtOnce) and, with no goroutine of the driver running, by
// the lock's first Check (CheckSeesKill).
type DriverKill struct {
	// Driver takes the locks. Its keep-alive checks must be an hour
	// apart, so that only the socket can explain a loss seen within the
	// tests' hang bound of 2 s.
	Driver interface {
		driver.Driver
		driver.Waiter
	}
	// Requests are the requests to take, by kind; each run sets a new
	// Owner.
	Requests map[string]driver.Request
	// Kill ends, on the server, the connection that holds r's lock. It
	// returns the instant its statement returned, and gone, which reports
	// whether that connection has left the server.
	Kill func(t *testing.T, r driver.Request) (killed time.Time, gone func() bool)
}

// SeenAtOnce takes each request runs times with Lock and kills its
// connection: the loss must be signalled through OnLost within 2 s (over
// 100× the logged loopback figures), Check must report it, and Unlock
// must fail with ErrNotHeld.
func (k DriverKill) SeenAtOnce(t *testing.T, runs int) {
	for kind, r := range k.Requests {
		t.Run(kind, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			took := make([]time.Duration, 0, runs)
			for i := range runs {
				r.Owner = RandomHex(16)
				// Lock, not TryLock: the last run's session may still be
				// letting its locks go.
				g, err := k.Driver.Lock(ctx, r)
				if err != nil {
					t.Fatal(err)
				}
				lost := checkedLostCh(t, g, kind)
				killed, _ := k.Kill(t, r)
				if !closedWithin(lost, 2*time.Second) {
					t.Fatalf("run %d: loss not signalled 2s after the kill", i)
				}
				took = append(took, time.Since(killed))
				if err := g.Check(time.Now()); err == nil {
					t.Fatalf("run %d: Check = nil after the loss was signalled", i)
				}
				if err := k.Driver.Unlock(ctx, r); !errors.Is(err, driver.ErrNotHeld) {
					t.Errorf("run %d: Unlock after the kill = %v, want ErrNotHeld", i, err)
				}
			}
			t.Logf("loss signalled after the kill returned: %s", percentiles(took))
		})
	}
}

// CheckSeesKill is for a driver none of whose goroutines watches its
// locks (a holder whose goroutines have not run since the kill): for each
// request, Check allocates nothing while the lock is held; after the kill,
// with the connection gone, no loss is signalled until the first Check,
// which reports it, and signals it; later Checks report the same loss.
func (k DriverKill) CheckSeesKill(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for kind, r := range k.Requests {
		r.Owner = RandomHex(16)
		g, err := k.Driver.TryLock(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		lost := checkedLostCh(t, g, kind)
		if n := testing.AllocsPerRun(1000, func() { _ = g.Check(time.Now()) }); n != 0 {
			t.Errorf("%s: Check allocates %v times per call while held", kind, n)
		}
		_, gone := k.Kill(t, r)
		if !Eventually(5*time.Second, gone) {
			t.Fatalf("%s: the killed connection is still on the server after 5s", kind)
		}
		time.Sleep(10 * time.Millisecond) // the close's FIN has surely arrived
		select {
		case <-lost:
			t.Fatalf("%s: loss signalled with no goroutine watching", kind)
		default:
		}
		err = g.Check(time.Now())
		if err == nil {
			t.Fatalf("%s: first Check after the kill = nil", kind)
		}
		t.Logf("%s: %v", kind, err)
		if !closedWithin(lost, 2*time.Second) {
			t.Errorf("%s: loss not signalled after Check found it", kind)
		}
		if err2 := g.Check(time.Now()); err2 == nil || err2.Error() != err.Error() {
			t.Errorf("%s: a later Check = %v, want the same loss", kind, err2)
		}
	}
}

// checkedLostCh checks that g, the grant of kind's lock, has a Check that
// finds the lock held, and returns LostCh(g).
func checkedLostCh(t *testing.T, g driver.Grant, kind string) <-chan struct{} {
	t.Helper()
	lost := LostCh(g)
	if g.Check == nil {
		t.Fatalf("%s: Grant.Check is nil", kind)
	}
	if err := g.Check(time.Now()); err != nil {
		t.Fatalf("%s: Check of a held lock = %v", kind, err)
	}
	return lost
}

// A SessionLoss is the body of a test of a backend whose held locks share
// sessions (server connections), up to PerSession locks on each: see
// Run.
type SessionLoss struct {
	// Locker takes the locks: its sessions hold PerSession locks each, and
	// learn of a session's end from the session itself (not only from a
	// keep-alive check, which the test does not wait for).
	Locker *dlock.Locker
	// Other is another client, which takes the lost locks after the loss.
	Other *dlock.Locker
	// PerSession is how many locks share one of Locker's sessions.
	PerSession int
	// Session names the server session that holds lease's lock.
	Session func(t *testing.T, lease *dlock.Lease) string
	// End ends that session on the server, as an operator would
	// (pg_terminate_backend, KILL).
	End func(t *testing.T, session string)
}

// Run takes 3*PerSession locks, ends the first one's session, and checks
// that the leases cost no goroutine each and that exactly the locks of
// that session are lost at once: each Done closes, Err matches ErrLost,
// Release matches ErrNotHeld, and Other then gets the lock (within 5s: a
// server may report a session's end before it lets its locks go); the
// locks of the other sessions stay held and release cleanly.
func (c SessionLoss) Run(t *testing.T, ctx context.Context, base string) {
	t.Helper()
	n := 3 * c.PerSession
	before := runtime.NumGoroutine()
	leases := make([]*dlock.Lease, n)
	sessions := make([]string, n)
	bySession := map[string][]int{}
	for i := range n {
		var err error
		if leases[i], err = c.Locker.TryAcquire(ctx, fmt.Sprintf("%s%d", base, i)); err != nil {
			t.Fatal(err)
		}
		sessions[i] = c.Session(t, leases[i])
		bySession[sessions[i]] = append(bySession[sessions[i]], i)
	}
	if len(bySession) != 3 {
		t.Fatalf("%d locks on %d sessions, want 3", n, len(bySession))
	}
	// A session's goroutines serve all its locks (Grant.OnLost): a lease
	// costs none of its own.
	if grew := runtime.NumGoroutine() - before; grew >= n {
		t.Errorf("%d leases on 3 sessions took %d more goroutines, want fewer than one per lease", n, grew)
	}
	ended := sessions[0]
	lost := bySession[ended]
	if len(lost) != c.PerSession {
		t.Fatalf("the first session holds %d locks, want %d", len(lost), c.PerSession)
	}
	c.End(t, ended)
	for _, i := range lost {
		if !closedWithin(leases[i].Done(), 5*time.Second) {
			t.Fatalf("lock %d: Done not closed 5s after its session was ended", i)
		}
		if err := leases[i].Err(); !errors.Is(err, dlock.ErrLost) {
			t.Errorf("lock %d: Err() = %v, want ErrLost", i, err)
		}
		if err := leases[i].Release(ctx); !errors.Is(err, dlock.ErrNotHeld) {
			t.Errorf("lock %d: Release after the loss = %v, want ErrNotHeld", i, err)
		}
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		got, err := c.Other.Acquire(actx, leases[i].Name())
		cancel()
		if err != nil {
			t.Errorf("lock %d: Acquire elsewhere after the loss: %v", i, err)
		} else {
			_ = got.Release(ctx)
		}
	}
	for i, lease := range leases {
		if sessions[i] == ended {
			continue
		}
		if err := lease.Err(); err != nil {
			t.Errorf("lock %d of another session: Err() = %v", i, err)
		}
		if err := lease.Release(ctx); err != nil {
			t.Errorf("lock %d of another session: Release = %v", i, err)
		}
	}
}

// A BackgroundRelease is the body of a test of a backend whose release
// goes on in the background when its context ends while the lock's
// connection is busy: see Run.
type BackgroundRelease struct {
	// Packages are the import paths of the backend and of the internal
	// packages that run its goroutines: none of their goroutines may be
	// left after Close.
	Packages []string
	// Open opens a new Locker on the backend, with occupy, which keeps the
	// connection holding owner's lock busy until free is called, and held,
	// which reports whether the server has name's lock held by anyone.
	Open func(t *testing.T) (l *dlock.Locker, occupy func(owner string) (free func()), held func(name string) bool)
}

// Run checks, 5 times, that Close waits for such a release: a Release
// whose 50 ms context ends while the connection is occupied returns an
// error and goes on waiting for the connection; once the connection is
// free, Close returns only after the release: the lock is free on the
// server and no goroutine of the backend's package is left.
func (c BackgroundRelease) Run(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i := range 5 {
		before := testenv.Goroutines(c.Packages...)
		l, occupy, held := c.Open(t)
		name := fmt.Sprintf("close-bg/%d-%d", time.Now().UnixNano(), i)
		lease := acquire(t, ctx, l, name)
		// Freed at the latest when the test ends, before the Locker's
		// Close, which a connection occupied for ever would hold up.
		free := sync.OnceFunc(occupy(lease.Owner()))
		t.Cleanup(free)
		rctx, rcancel := context.WithTimeout(ctx, 50*time.Millisecond)
		err := lease.Release(rctx)
		rcancel()
		if err == nil {
			t.Fatal("Release with the connection occupied succeeded")
		}
		// The release, waiting for the connection, gets it as it is
		// freed, before Close can.
		if !Eventually(10*time.Second, func() bool { return c.releaseWaiting(before) }) {
			t.Fatalf("run %d: no release waiting for the connection", i)
		}
		free()
		if err := l.Close(); err != nil {
			t.Fatalf("run %d: Close: %v", i, err)
		}
		// A goroutine Close waited for may still be returning from the
		// deferred call that let Close go on: runnable, not waiting for
		// anything. Such goroutines alone are given a moment to exit.
		left := testenv.NewGoroutines(before, c.Packages...)
		if left != "" && strings.Count("\n"+left, "\ngoroutine ") == strings.Count(left, " [runnable]:") {
			Eventually(prompt, func() bool { left = testenv.NewGoroutines(before, c.Packages...); return left == "" })
		}
		if left != "" {
			t.Fatalf("run %d: goroutines of the driver left after Close:\n%s", i, left)
		}
		if held(name) {
			t.Fatalf("run %d: the lock is held on the server after Close", i)
		}
	}
}

// releaseWaiting reports whether a release started since before waits
// for its connection: a goroutine of the backend's release blocked in
// its session's Take.
func (c BackgroundRelease) releaseWaiting(before map[int64]string) bool {
	for id, s := range testenv.Goroutines(c.Packages...) {
		if _, ok := before[id]; !ok && strings.Contains(s, ").release") && strings.Contains(s, ").Take(") &&
			(strings.Contains(s, "[select") || strings.Contains(s, "[chan send")) {
			return true
		}
	}
	return false
}

// HoldMany takes n locks named prefix0, prefix1, ... through d with
// TryLock, each with a fresh owner and a TTL of a minute, for tests of how
// a backend spreads many held locks over its sessions; release them with
// UnlockAll.
func HoldMany(t testing.TB, ctx context.Context, d driver.Driver, prefix string, n int) []driver.Request {
	t.Helper()
	rs := make([]driver.Request, 0, n)
	for i := range n {
		r := driver.Request{Name: fmt.Sprintf("%s%d", prefix, i), Owner: RandomHex(16), TTL: time.Minute}
		if _, err := d.TryLock(ctx, r); err != nil {
			t.Fatalf("lock %d: %v", i, err)
		}
		rs = append(rs, r)
	}
	return rs
}

// UnlockAll unlocks every request of rs through d.
func UnlockAll(t testing.TB, ctx context.Context, d driver.Driver, rs []driver.Request) {
	t.Helper()
	for _, r := range rs {
		if err := d.Unlock(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
}

// RestartKeeps is the check, for a backend whose locks live on the
// store's disk, that a lock held while the store restarts is still held
// afterwards: a holds the mutex name across restart; then its lease
// renews, b cannot take the lock, and once a releases it b takes it with
// a higher token.
func RestartKeeps(t *testing.T, ctx context.Context, a, b *dlock.Locker, name string, restart func()) {
	t.Helper()
	lease := acquire(t, ctx, a, name)
	restart()
	if err := lease.Renew(ctx); err != nil {
		t.Fatalf("Renew after the restart: %v", err)
	}
	if _, err := b.TryAcquire(ctx, name); err == nil {
		t.Fatal("another client took the lock after the restart")
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	next := acquire(t, ctx, b, name)
	if next.Token() <= lease.Token() {
		t.Errorf("token after the restart %d, want above %d", next.Token(), lease.Token())
	}
	_ = next.Release(ctx)
}
