package locktest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
)

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
