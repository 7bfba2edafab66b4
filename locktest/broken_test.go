package locktest_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"

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
	// Take the lock for real when it is free, so that refresh and release
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
			default:
				t.Fatalf("unknown LOCKTEST_BROKEN %q", kind)
			}
			l, err := dlock.New(d, opts...)
			if err != nil {
				t.Fatal(err)
			}
			return l
		},
		TakeAway: func(t *testing.T, name string) { store.Revoke(name) },
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
		{"grant-all", []string{"TryAcquireWhileHeld", "AcquireWaitsForRelease", "CancelDuringWait", "MutualExclusion"}},
		{"repeat-tokens", []string{"TokensIncrease", "MutualExclusion", "AcquireWaitsForRelease", "ExpiresWithoutRenewal"}},
	} {
		t.Run(c.kind, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestBrokenBackend$", "-test.v", "-test.count=1")
			cmd.Env = append(os.Environ(), "LOCKTEST_BROKEN="+c.kind)
			out, err := cmd.CombinedOutput()
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
