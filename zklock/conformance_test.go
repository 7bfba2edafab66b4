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
			(&admin{t: t, conn: adm.conn, layout: adm.layout}).takeAway(prefix, name)
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

// TestConformanceLayouts runs the suite in the peers' layouts, whose
// kinds share the name's znode: in kazoo's the mutex, the write lock and
// the election of a name are one queue, as kazoo's Lock, WriteLock and
// Election on one path are.
func TestConformanceLayouts(t *testing.T) {
	servers := []string{testenv.ZKAddr(t)}
	for _, layout := range []zklock.Layout{zklock.LayoutCurator, zklock.LayoutKazoo} {
		t.Run(string(layout), func(t *testing.T) {
			prefix := testPrefix()
			adm := newAdmin(t, servers)
			adm.layout = layout
			h := suiteHarness(prefix, adm, func(t *testing.T, opts ...dlock.Option) *dlock.Locker {
				d, err := zklock.NewDriver(servers, &zklock.Options{Prefix: prefix, SessionTimeout: suiteSession, Layout: layout})
				if err != nil {
					t.Fatal(err)
				}
				l, err := dlock.New(d, opts...)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = l.Close() })
				return l
			})
			h.ElectionIsMutex = layout == zklock.LayoutKazoo
			h.WriteIsMutex = layout == zklock.LayoutKazoo
			locktest.Run(t, h)
		})
	}
}
