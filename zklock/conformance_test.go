package zklock_test

import (
	"testing"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/locktest"
	"github.com/dlockgo/dlock/zklock"
)

// suiteSession is the session timeout of the conformance runs, and the
// suite's TTL: a crashed holder's lock is free that long after the
// ensemble last heard from it.
const suiteSession = 2 * time.Second

func runSuite(t *testing.T, servers []string) {
	prefix := testPrefix()
	locktest.Run(t, suiteHarness(prefix, newAdmin(t, servers), func(t *testing.T, opts ...dlock.Option) *dlock.Locker {
		l, _ := newLocker(t, servers, prefix, suiteSession, opts...)
		return l
	}))
}

// suiteHarness is the suite's harness for Lockers of newLocker under
// prefix, whose nodes adm may delete.
func suiteHarness(prefix string, adm *admin, newLocker func(t *testing.T, opts ...dlock.Option) *dlock.Locker) locktest.Harness {
	return locktest.Harness{
		NewLocker: newLocker,
		TakeAway: func(t *testing.T, name string) {
			t.Helper()
			(&admin{t: t, conn: adm.conn}).takeAway(prefix, name)
		},
		TTL:   suiteSession,
		Crash: func(t *testing.T, l *dlock.Locker) { l.Driver().(*zklock.Driver).Crash() },
	}
}

// TestConformance runs the suite against the standalone server.
func TestConformance(t *testing.T) {
	runSuite(t, []string{testenv.ZKAddr(t)})
}

// TestConformanceEnsemble runs the suite against the 3-node ensemble, whose
// clients spread over leader and followers.
func TestConformanceEnsemble(t *testing.T) {
	runSuite(t, testenv.ZKEnsembleAddrs(t))
}
