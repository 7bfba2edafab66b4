package locktest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
)

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

// New returns a Locker over d with opts, closed when t ends; an error fails t.
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

// Must returns the lease of an acquisition, failing t if it failed:
// locktest.Must(t)(l.Acquire(ctx, name)).
func Must(t testing.TB) func(*dlock.Lease, error) *dlock.Lease {
	return func(l *dlock.Lease, err error) *dlock.Lease {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
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

// NoLeak checks that the goroutines a test started have ended: that
// runtime.NumGoroutine comes back to before (read before the test started
// any) within 5 s, a hang bound for goroutines that end a moment after the
// Close that ends them; else it reports every goroutine's stack.
func NoLeak(t testing.TB, before int) {
	t.Helper()
	deadline := time.Now().Add(prompt)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<20)
		t.Errorf("%d goroutines before, %d after:\n%s", before, n, buf[:runtime.Stack(buf, true)])
	}
}

// LostCh returns a channel that closes when the driver reports g's lock
// lost through g.OnLost, for tests that use a driver directly and wait on
// the loss. It makes g's one OnLost call, so g must not also be given to
// dlock. The channel is nil (it never closes) when g has no OnLost.
func LostCh(g driver.Grant) <-chan struct{} {
	if g.OnLost == nil {
		return nil
	}
	ch := make(chan struct{})
	var once sync.Once
	g.OnLost(func() { once.Do(func() { close(ch) }) })
	return ch
}

// Turns is a crowd of goroutines taking one lock in turn, for the
// backends' many-waiters tests; see StartTurns.
type Turns struct {
	t       *testing.T
	n       int
	done    chan struct{}
	holders gauge

	mu     sync.Mutex
	tokens []uint64 // in the order of grants
}

// StartTurns starts n goroutines; the i-th acquires name through
// lockers[i%len(lockers)] under ctx, records its token while it holds the
// lock, and releases it at once. An Acquire or Release that fails fails t.
// Start them while another client holds the lock, so that they all wait.
func StartTurns(t *testing.T, ctx context.Context, lockers []*dlock.Locker, name string, n int) *Turns {
	tt := &Turns{t: t, n: n, done: make(chan struct{})}
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			lease, err := lockers[i%len(lockers)].Acquire(ctx, name)
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				return
			}
			tt.holders.enter()
			tt.mu.Lock()
			tt.tokens = append(tt.tokens, lease.Token())
			tt.mu.Unlock()
			tt.holders.leave()
			if err := lease.Release(context.WithoutCancel(ctx)); err != nil {
				t.Errorf("waiter %d: release: %v", i, err)
			}
		})
	}
	go func() { wg.Wait(); close(tt.done) }()
	return tt
}

// Done is closed once every goroutine has returned.
func (tt *Turns) Done() <-chan struct{} { return tt.done }

// Granted returns how many of the goroutines have had the lock so far.
func (tt *Turns) Granted() int {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	return len(tt.tokens)
}

// Check, once Done is closed, fails t unless every goroutine had the
// lock, never two at once, with tokens that strictly increase in the
// order of the grants and start above after (the token of the holder
// they waited behind; 0 for none).
func (tt *Turns) Check(after uint64) {
	tt.t.Helper()
	<-tt.done
	if m := tt.holders.max.Load(); m > 1 {
		tt.t.Errorf("%d holders at once", m)
	}
	if len(tt.tokens) != tt.n {
		tt.t.Errorf("%d of %d waiters got the lock", len(tt.tokens), tt.n)
	}
	last := after
	for i, tok := range tt.tokens {
		if tok <= last {
			tt.t.Errorf("grant %d of %d has token %d after %d: not strictly increasing in the order of grants", i, len(tt.tokens), tok, last)
			return
		}
		last = tok
	}
}

// BadURL is a URL of a secured store that must fail to open, and what its
// error must say.
type BadURL struct {
	// What names the case in the test's output ("wrong password").
	What string
	// URL is the URL to open.
	URL string
	// Cause is a piece of text the error must hold, case-insensitively
	// (for example "certificate", "password", "cacert"), so that a user
	// can tell what was wrong.
	Cause string
}

// OpenTimeout bounds each Open of RefusesBadURLs.
const OpenTimeout = 15 * time.Second

// RefusesBadURLs opens each of bad with dlock.Open and checks that it
// fails, with an error that names its cause and holds none of secrets
// (passwords, tokens), as a user's log would show it.
func RefusesBadURLs(t *testing.T, secrets []string, bad []BadURL) {
	t.Helper()
	for _, b := range bad {
		t.Run(strings.ReplaceAll(b.What, " ", "_"), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), OpenTimeout)
			defer cancel()
			start := time.Now()
			l, err := dlock.Open(ctx, b.URL)
			if err == nil {
				_ = l.Close()
				t.Fatalf("%s: Open succeeded, want an error", b.What)
			}
			msg := err.Error()
			t.Logf("%s: %v (after %v)", b.What, msg, time.Since(start).Round(time.Millisecond))
			if !strings.Contains(strings.ToLower(msg), strings.ToLower(b.Cause)) {
				t.Errorf("%s: the error does not say %q: %v", b.What, b.Cause, msg)
			}
			for _, s := range secrets {
				if s != "" && strings.Contains(msg, s) {
					t.Errorf("%s: the error shows a secret: %v", b.What, msg)
				}
			}
		})
	}
}

// Opener returns a Harness.NewLocker that opens rawURL with dlock.Open,
// within OpenTimeout, and fails the test if that fails.
func Opener(rawURL string) func(t *testing.T, opts ...dlock.Option) *dlock.Locker {
	return func(t *testing.T, opts ...dlock.Option) *dlock.Locker {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), OpenTimeout)
		defer cancel()
		l, err := dlock.Open(ctx, rawURL, opts...)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
}
