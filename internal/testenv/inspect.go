package testenv

import (
	"context"
	"slices"
	"testing"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
)

// PrefixNames is a prefix and the names, one per entry, that an Inspect
// of it must list, in order.
type PrefixNames struct {
	Prefix string
	Names  []string
}

// CheckInspectNames checks, for each case, that insp.Inspect(ctx,
// c.Prefix) lists exactly c.Names.
func CheckInspectNames(t testing.TB, ctx context.Context, insp driver.Inspector, cases []PrefixNames) {
	t.Helper()
	for _, c := range cases {
		got, err := insp.Inspect(ctx, c.Prefix)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, g := range got {
			names = append(names, g.Name)
		}
		if !slices.Equal(names, c.Names) {
			t.Errorf("Inspect(%q) names = %q, want %q", c.Prefix, names, c.Names)
		}
	}
}

// InspectScene is the scene of the Inspect tests of the backends that hold
// every kind in a tree (etcd, ZooKeeper): on one Locker, the mutexes
// jobs/a, jobs/a/b (nested in it) and elsewhere, jobs/b taken and
// released, two readers of jobs/rw and the leader of jobs/e; a waiter
// queued behind jobs/a and a writer behind the readers.
type InspectScene struct {
	A, AB, R1, R2, Lead *dlock.Lease

	cancel  context.CancelFunc
	waiting chan error
	writer  chan *dlock.Lease
}

// NewInspectScene sets the scene up on l; the waiters are queued, or on
// their way, when it returns.
func NewInspectScene(t testing.TB, ctx context.Context, l *dlock.Locker) *InspectScene {
	t.Helper()
	take := func(lease *dlock.Lease, err error) *dlock.Lease {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return lease
	}
	s := &InspectScene{waiting: make(chan error, 1), writer: make(chan *dlock.Lease, 1)}
	s.A = take(l.Acquire(ctx, "jobs/a"))
	s.AB = take(l.Acquire(ctx, "jobs/a/b"))
	must(t, take(l.Acquire(ctx, "jobs/b")).Release(ctx))
	take(l.Acquire(ctx, "elsewhere"))
	s.R1 = take(l.AcquireRead(ctx, "jobs/rw"))
	s.R2 = take(l.AcquireRead(ctx, "jobs/rw"))
	s.Lead = take(l.Campaign(ctx, "jobs/e", "me"))
	wctx, cancel := context.WithCancel(ctx)
	s.cancel = cancel
	t.Cleanup(cancel)
	go func() { _, err := l.Acquire(wctx, "jobs/a"); s.waiting <- err }()
	go func() { w, _ := l.AcquireWrite(wctx, "jobs/rw"); s.writer <- w }()
	return s
}

// Finish checks the names each prefix lists on names (a prefix that ends
// inside a segment, one naming a nested lock), lets the readers go, checks
// that other lists the writer alone on jobs/rw, with its token and owner
// and nobody waiting, and ends the waiter.
func (s *InspectScene) Finish(t testing.TB, ctx context.Context, names, other driver.Inspector) {
	t.Helper()
	CheckInspectNames(t, ctx, names, []PrefixNames{
		{Prefix: "jobs/a", Names: []string{"jobs/a", "jobs/a/b"}},
		{Prefix: "jobs/a/", Names: []string{"jobs/a/b"}},
		{Prefix: "else", Names: []string{"elsewhere"}},
		{Prefix: "", Names: []string{"elsewhere", "jobs/a", "jobs/a/b", "jobs/e", "jobs/rw", "jobs/rw"}},
		{Prefix: "nothing"},
	})
	for _, r := range []*dlock.Lease{s.R1, s.R2} {
		must(t, r.Release(ctx))
	}
	w := <-s.writer
	if w == nil {
		t.Fatal("the writer did not get the lock")
	}
	got, err := other.Inspect(ctx, "jobs/rw")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Mode != driver.Write || got[0].Token != w.Token() || got[0].Owner != w.Owner() || got[0].Waiters != 0 {
		t.Errorf("Inspect(jobs/rw) = %+v, want the writer alone, token %d owner %s", got, w.Token(), w.Owner())
	}
	s.cancel()
	<-s.waiting
}
