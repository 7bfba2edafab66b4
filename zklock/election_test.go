package zklock_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/locktest"
	"github.com/dlockgo/dlock/zklock"
)

// next returns the next value from an Observe channel.
var next = locktest.NextLeader

// TestElection: three candidates; an observer sees the first lead, then,
// after it resigns, the second, and after the second crashes, the third,
// once the ensemble expired the crashed one's session; then nobody.
// Leader agrees with the observer, and tokens increase. On the standalone
// server and on the ensemble.
func TestElection(t *testing.T) {
	t.Run("standalone", func(t *testing.T) { testElection(t, []string{testenv.ZKAddr(t)}) })
	t.Run("ensemble", func(t *testing.T) { testElection(t, testenv.ZKEnsembleAddrs(t)) })
}

func testElection(t *testing.T, servers []string) {
	ctx := locktest.Context(t, 60*time.Second)
	prefix := testPrefix()
	adm := newAdmin(t, servers)
	const timeout = 2 * time.Second
	obs, _ := newLocker(t, servers, prefix, timeout)
	a, _ := newLocker(t, servers, prefix, timeout)
	b, db := newLocker(t, servers, prefix, timeout)
	c, _ := newLocker(t, servers, prefix, timeout)

	octx, ocancel := context.WithCancel(ctx)
	defer ocancel()
	ch, err := obs.Observe(octx, "elect")
	if err != nil {
		t.Fatal(err)
	}
	if info := next(t, ch, 5*time.Second); info != (dlock.LeaderInfo{}) {
		t.Fatalf("first value %+v before any candidate, want the zero LeaderInfo", info)
	}
	// The mutex of the same name has nothing to do with the election.
	mutex := locktest.Must(t)(c.TryAcquire(ctx, "elect"))
	defer func() { _ = mutex.Release(ctx) }()

	la := locktest.Must(t)(a.Campaign(ctx, "elect", "node-a"))
	if info := next(t, ch, 5*time.Second); info != (dlock.LeaderInfo{Value: "node-a", Token: la.Token()}) {
		t.Fatalf("observed %+v, want node-a with token %d", info, la.Token())
	}
	if info, err := obs.Leader(ctx, "elect"); err != nil || info != (dlock.LeaderInfo{Value: "node-a", Token: la.Token()}) {
		t.Fatalf("Leader = %+v, %v; want node-a with token %d", info, err, la.Token())
	}
	campaign := func(l *dlock.Locker, value string) <-chan *dlock.Lease {
		res := make(chan *dlock.Lease, 1)
		go func() {
			lease, err := l.Campaign(ctx, "elect", value)
			if err != nil {
				t.Errorf("%s: %v", value, err)
			}
			res <- lease
		}()
		return res
	}
	gotB := campaign(b, "node-b")
	adm.waitNodes(prefix+"/#elect/elect", 2, 5*time.Second)
	gotC := campaign(c, "node-c")
	adm.waitNodes(prefix+"/#elect/elect", 3, 5*time.Second)
	select {
	case info := <-ch:
		t.Fatalf("observed %+v while node-a still leads", info)
	case <-time.After(200 * time.Millisecond):
	}

	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lb := <-gotB
	if lb == nil {
		return
	}
	if info := next(t, ch, 5*time.Second); info != (dlock.LeaderInfo{Value: "node-b", Token: lb.Token()}) {
		t.Fatalf("after node-a resigned: observed %+v, want node-b with token %d", info, lb.Token())
	}
	if lb.Token() <= la.Token() {
		t.Errorf("node-b's token %d is not above node-a's %d", lb.Token(), la.Token())
	}

	db.Crash()
	crashed := time.Now()
	info := next(t, ch, 30*time.Second) // a hang bound, 15× the session timeout
	lc := <-gotC
	if lc == nil {
		return
	}
	if info != (dlock.LeaderInfo{Value: "node-c", Token: lc.Token()}) {
		t.Fatalf("after node-b crashed: observed %+v, want node-c with token %d", info, lc.Token())
	}
	t.Logf("the crashed leader was replaced %v after the crash (session timeout %v)", time.Since(crashed).Round(time.Millisecond), timeout)
	select {
	case <-lb.Done():
	default:
		t.Error("node-c leads while the crashed node-b's lease is not declared lost")
	}
	if lc.Token() <= lb.Token() {
		t.Errorf("node-c's token %d is not above node-b's %d", lc.Token(), lb.Token())
	}

	if err := lc.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if info := next(t, ch, 5*time.Second); info != (dlock.LeaderInfo{}) {
		t.Fatalf("after the last resigned: observed %+v, want nobody", info)
	}
	if info, err := obs.Leader(ctx, "elect"); err != nil || info != (dlock.LeaderInfo{}) {
		t.Fatalf("Leader with nobody leading = %+v, %v", info, err)
	}
	ocancel()
	select {
	case _, ok := <-ch:
		if ok {
			t.Error("a value after the context ended")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the Observe channel did not close when its context ended")
	}
}

// TestObserveEnds: Observe channels close when the driver closes, and
// their goroutines end, whether or not the reader keeps up.
func TestObserveEnds(t *testing.T) {
	ctx := locktest.Context(t, 30*time.Second)
	servers := []string{testenv.ZKAddr(t)}
	prefix := testPrefix()
	before := runtime.NumGoroutine()
	cand, err := zklock.New(servers, &zklock.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	obs, err := dlock.Open(ctx, "zk://"+servers[0]+prefix)
	if err != nil {
		t.Fatal(err)
	}
	read, err := obs.Observe(ctx, "ends")
	if err != nil {
		t.Fatal(err)
	}
	unread, err := obs.Observe(ctx, "ends")
	if err != nil {
		t.Fatal(err)
	}
	if info := next(t, read, 5*time.Second); info != (dlock.LeaderInfo{}) {
		t.Fatalf("first value %+v, want nobody", info)
	}
	// Leaders come and go; the unread channel must not block anything.
	var last dlock.LeaderInfo
	for i := range 3 {
		lease := locktest.Must(t)(cand.Campaign(ctx, "ends", "v"+string(rune('0'+i))))
		last = dlock.LeaderInfo{Value: "v" + string(rune('0'+i)), Token: lease.Token()}
		if info := next(t, read, 5*time.Second); info != last {
			t.Fatalf("observed %+v, want %+v", info, last)
		}
		if i < 2 {
			_ = lease.Release(ctx)
			if info := next(t, read, 5*time.Second); info != (dlock.LeaderInfo{}) {
				t.Fatalf("observed %+v after a resignation, want nobody", info)
			}
		}
	}
	// A reader that fell behind gets the latest value, not a backlog.
	time.Sleep(100 * time.Millisecond)
	if info := next(t, unread, 5*time.Second); info != last {
		t.Errorf("the slow reader got %+v, want the latest %+v", info, last)
	}
	if err := cand.Close(); err != nil { // no lease's goroutine to count
		t.Fatal(err)
	}
	if err := obs.Close(); err != nil {
		t.Fatal(err)
	}
	for _, ch := range []<-chan dlock.LeaderInfo{read, unread} {
		select {
		case _, ok := <-ch:
			for ok {
				_, ok = <-ch
			}
		case <-time.After(5 * time.Second):
			t.Fatal("an Observe channel did not close with the driver")
		}
	}
	locktest.NoLeak(t, before)
}
