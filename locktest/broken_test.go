package locktest_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/locktest"
	"github.com/dlockgo/dlock/memlock"
)

// grantAll grants every attempt, whoever holds the lock.
type grantAll struct {
	*memlock.Driver
	seq *atomic.Uint64
}

func (g grantAll) TryLock(ctx context.Context, r driver.Request) (driver.Grant, error) {
	// Take the lock for real when it is free, so that renew and release
	// work; but grant anyway when it is not.
	gr, err := g.Driver.TryLock(ctx, r)
	if err != nil {
		return driver.Grant{Token: g.seq.Add(1) + 1<<40}, nil
	}
	return gr, nil
}

func (g grantAll) Lock(ctx context.Context, r driver.Request) (driver.Grant, error) {
	return g.TryLock(ctx, r)
}

// repeatTokens is a correct lock whose fencing tokens never change.
type repeatTokens struct{ *memlock.Driver }

func (d repeatTokens) TryLock(ctx context.Context, r driver.Request) (driver.Grant, error) {
	g, err := d.Driver.TryLock(ctx, r)
	g.Token = 7
	return g, err
}

func (d repeatTokens) Lock(ctx context.Context, r driver.Request) (driver.Grant, error) {
	g, err := d.Driver.Lock(ctx, r)
	g.Token = 7
	return g, err
}

// looseKinds gets the new kinds subtly wrong: writers take the lock as
// readers do, a semaphore lets in one holder too many, and Observe
// reports the first leader only.
type looseKinds struct{ *memlock.Driver }

func (d looseKinds) loosen(r driver.Request) driver.Request {
	switch r.Mode {
	case driver.Write:
		r.Mode = driver.Read
	case driver.Permit:
		r.Limit++
	}
	return r
}

func (d looseKinds) TryLock(ctx context.Context, r driver.Request) (driver.Grant, error) {
	return d.Driver.TryLock(ctx, d.loosen(r))
}

func (d looseKinds) Lock(ctx context.Context, r driver.Request) (driver.Grant, error) {
	return d.Driver.Lock(ctx, d.loosen(r))
}

func (d looseKinds) Renew(ctx context.Context, r driver.Request) (time.Time, error) {
	return d.Driver.Renew(ctx, d.loosen(r))
}

func (d looseKinds) Unlock(ctx context.Context, r driver.Request) error {
	return d.Driver.Unlock(ctx, d.loosen(r))
}

func (d looseKinds) Observe(ctx context.Context, name string) (<-chan driver.LeaderInfo, error) {
	info, err := d.Driver.Leader(ctx, name)
	if err != nil {
		return nil, err
	}
	ch := make(chan driver.LeaderInfo, 1)
	ch <- info
	context.AfterFunc(ctx, func() { close(ch) })
	return ch, nil
}

// pollingWriter makes a writer wait by polling TryLock instead of queuing,
// so that readers never see it waiting and a stream of readers starves it.
type pollingWriter struct{ *memlock.Driver }

func (d pollingWriter) Lock(ctx context.Context, r driver.Request) (driver.Grant, error) {
	if r.Mode != driver.Write {
		return d.Driver.Lock(ctx, r)
	}
	for {
		g, err := d.Driver.TryLock(ctx, r)
		if err == nil || !errors.Is(err, driver.ErrNotAcquired) {
			return g, err
		}
		select {
		case <-ctx.Done():
			return driver.Grant{}, ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
}

// mutexOnly hides every optional interface but Waiter: the suite must
// find the other kinds unsupported, and pass.
// blindInspect lists every lock under the prefix but the last one.
type blindInspect struct{ *memlock.Driver }

func (b blindInspect) Inspect(ctx context.Context, prefix string) ([]driver.LockInfo, error) {
	got, err := b.Driver.Inspect(ctx, prefix)
	if len(got) > 0 {
		got = got[:len(got)-1]
	}
	return got, err
}

type mutexOnly struct{ d *memlock.Driver }

func (m mutexOnly) TryLock(ctx context.Context, r driver.Request) (driver.Grant, error) {
	return m.d.TryLock(ctx, r)
}

func (m mutexOnly) Lock(ctx context.Context, r driver.Request) (driver.Grant, error) {
	return m.d.Lock(ctx, r)
}

func (m mutexOnly) Renew(ctx context.Context, r driver.Request) (time.Time, error) {
	return m.d.Renew(ctx, r)
}

func (m mutexOnly) Unlock(ctx context.Context, r driver.Request) error { return m.d.Unlock(ctx, r) }

func (m mutexOnly) Close() error { return m.d.Close() }

// TestBrokenBackend is the entry point the subprocesses of
// TestSuiteCatchesBrokenBackends run; it does nothing on its own.
func TestBrokenBackend(t *testing.T) {
	kind := os.Getenv("LOCKTEST_BROKEN")
	if kind == "" {
		return
	}
	store := memlock.NewStore()
	var seq atomic.Uint64
	locktest.Run(t, locktest.Harness{
		NewLocker: func(t *testing.T, opts ...dlock.Option) *dlock.Locker {
			var d driver.Driver
			switch kind {
			case "grant-all":
				d = grantAll{store.Driver(), &seq}
			case "repeat-tokens":
				d = repeatTokens{store.Driver()}
			case "loose-kinds":
				d = looseKinds{store.Driver()}
			case "polling-writer":
				d = pollingWriter{store.Driver()}
			case "mutex-only":
				d = mutexOnly{store.Driver()}
			case "blind-inspect":
				d = blindInspect{store.Driver()}
			case "kinds-apart":
				d = store.Driver() // correct, but claims ElectionIsMutex below
			default:
				t.Fatalf("unknown LOCKTEST_BROKEN %q", kind)
			}
			l, err := dlock.New(d, opts...)
			if err != nil {
				t.Fatal(err)
			}
			return l
		},
		TakeAway:        func(t *testing.T, name string) { store.Revoke(name) },
		ElectionIsMutex: kind == "kinds-apart",
	})
}

// TestSuiteCatchesBrokenBackends runs the suite against deliberately broken
// backends in subprocesses and checks that it fails them, on the
// properties they break.
func TestSuiteCatchesBrokenBackends(t *testing.T) {
	for _, c := range []struct {
		kind     string
		mustFail []string
	}{
		{"grant-all", []string{"TryAcquireWhileHeld", "AcquireWaitsForRelease", "CancelDuringWait", "MutualExclusion",
			"RWReadersShareWritersExclude", "RWTryAcquire", "SemaphoreLimit", "SemaphoreTryWhenFull",
			"MultiOppositeOrders", "MultiAllOrNothing", "ElectionOneLeader"}},
		{"repeat-tokens", []string{"TokensIncrease", "MutualExclusion", "AcquireWaitsForRelease", "ExpiresWithoutRenewal",
			"RWTokens", "SemaphoreLimit", "ElectionOneLeader"}},
		{"loose-kinds", []string{"RWReadersShareWritersExclude", "RWTryAcquire", "SemaphoreLimit", "SemaphoreTryWhenFull",
			"ElectionObserve"}},
		{"polling-writer", []string{"RWWriterNotStarved", "RWTryAcquire"}},
		{"blind-inspect", []string{"InspectListsHolders"}},
		// The election and the mutex of a name kept apart, where the
		// harness says they are one queue.
		{"kinds-apart", []string{"ElectionOneLeader", "ElectionTryCampaign"}},
		{"mutex-only", nil}, // passes: the other kinds are checked as unsupported
	} {
		t.Run(c.kind, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(os.Args[0], "-test.run=^TestBrokenBackend$", "-test.v", "-test.count=1")
			cmd.Env = append(os.Environ(), "LOCKTEST_BROKEN="+c.kind)
			out, err := cmd.CombinedOutput()
			if c.mustFail == nil {
				if err != nil {
					t.Fatalf("the suite failed a correct %s backend: %v\n%s", c.kind, err, out)
				}
				return
			}
			if err == nil {
				t.Fatalf("the suite passed a %s backend:\n%s", c.kind, out)
			}
			for _, p := range c.mustFail {
				if !strings.Contains(string(out), "--- FAIL: TestBrokenBackend/"+p+" ") {
					t.Errorf("the suite did not fail %s on a %s backend", p, c.kind)
				}
			}
			if t.Failed() {
				t.Logf("output:\n%s", out)
			}
		})
	}
}
