package locktest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
)

// Election properties, for backends that support driver.Leader.

func (s *suite) noElection(t *testing.T, ctx context.Context, l *dlock.Locker, name string) bool {
	if l.Supports(driver.Leader) {
		return false
	}
	unsupported(t, ctx, l, driver.Leader, func() (*dlock.Lease, error) {
		_, err := l.Leader(ctx, name)
		return nil, err
	})
	unsupported(t, ctx, l, driver.Leader, func() (*dlock.Lease, error) {
		_, err := l.Observe(ctx, name)
		return nil, err
	})
	unsupported(t, ctx, l, driver.Leader, func() (*dlock.Lease, error) { return l.TryCampaign(ctx, name, "candidate") })
	unsupported(t, ctx, l, driver.Leader, func() (*dlock.Lease, error) {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		return l.Campaign(cctx, name, "candidate")
	})
	return true
}

// electionOneLeader: candidates on four clients campaign, lead briefly and
// resign, over and over; a leaders gauge never exceeds 1, and Leader, read
// by another client, names the leader with its token.
func (s *suite) electionOneLeader(t *testing.T, ctx context.Context, name string) {
	reader := s.locker(t)
	if s.noElection(t, ctx, reader, name) {
		return
	}
	if info, err := reader.Leader(ctx, name); err != nil || info != (dlock.LeaderInfo{}) {
		t.Errorf("Leader() before any campaign = %+v, %v; want the zero LeaderInfo", info, err)
	}
	// The election "x" is unrelated to the mutex "x", unless the backend
	// says they are one queue.
	mutex := acquire(t, ctx, reader, name)
	// Where the two are one queue, the campaign must wait until its
	// deadline; elsewhere it must lead, the deadline only a hang bound.
	campaign := func(ctx context.Context) (*dlock.Lease, error) {
		return reader.Campaign(ctx, name, "while-the-mutex-is-held")
	}
	if s.h.ElectionIsMutex {
		mustTimeOut(t, ctx, s.h.TTL, campaign, "Campaign while the mutex of the same name, in the same queue, is held")
	} else {
		cctx, cancel := context.WithTimeout(ctx, s.lossBound())
		release(t, ctx, mustAcquire(t, func() (*dlock.Lease, error) { return campaign(cctx) }, "Campaign while the mutex of the same name is held"))
		cancel()
	}
	release(t, ctx, mutex)
	const candidates, rounds = 4, 4
	var (
		g      gauge
		tokens []uint64
		mu     sync.Mutex
		fail   firstError
		all    sync.WaitGroup
	)
	hold := min(s.h.TTL/100, 5*time.Millisecond)
	for i := range candidates {
		l := s.locker(t)
		value := fmt.Sprintf("candidate-%d", i)
		all.Go(func() {
			for range rounds {
				lease, err := l.Campaign(ctx, name, value)
				if err != nil {
					fail.report(t, "Campaign: %v", err)
					return
				}
				if n := g.enter(); n > 1 {
					fail.report(t, "%d leaders at once", n)
				}
				mu.Lock()
				tokens = append(tokens, lease.Token())
				mu.Unlock()
				if lease.Mode() != driver.Leader {
					fail.report(t, "Mode() of leadership = %v, want leader", lease.Mode())
				}
				info, err := reader.Leader(ctx, name)
				if err != nil {
					fail.report(t, "Leader(): %v", err)
				} else if info.Value != value || info.Token != lease.Token() {
					fail.report(t, "Leader() = %+v while %q leads with token %d", info, value, lease.Token())
				}
				time.Sleep(hold)
				g.leave()
				if err := lease.Release(ctx); err != nil {
					fail.report(t, "resign: %v", err)
				}
			}
		})
	}
	all.Wait()
	checkIncreasing(t, tokens, "in the order leaders were elected")
	if info, err := reader.Leader(ctx, name); err != nil || info != (dlock.LeaderInfo{}) {
		t.Errorf("Leader() after every candidate resigned = %+v, %v; want the zero LeaderInfo", info, err)
	}
}

// electionTryCampaign: TryCampaign takes a free election at once, even
// while the mutex of the same name is held; fails with ErrNotAcquired,
// without queueing, while another candidate leads (one that took it with
// TryCampaign, or one that waited in Campaign); and succeeds again, with a
// greater token, once nobody leads.
func (s *suite) electionTryCampaign(t *testing.T, ctx context.Context, name string) {
	a, b, c := s.locker(t, dlock.WithTTL(holdTTL)), s.locker(t), s.locker(t)
	if s.noElection(t, ctx, a, name) {
		return
	}
	mutex := acquire(t, ctx, c, name)
	if s.h.ElectionIsMutex {
		mustFail(t, ctx, func() (*dlock.Lease, error) { return a.TryCampaign(ctx, name, "a") },
			"TryCampaign while the mutex of the same name, in the same queue, is held")
		release(t, ctx, mutex)
	}
	lead := mustAcquire(t, func() (*dlock.Lease, error) { return a.TryCampaign(ctx, name, "a") },
		"TryCampaign of a free election while the mutex of the same name is held")
	if !s.h.ElectionIsMutex {
		release(t, ctx, mutex)
	}
	if lead.Mode() != driver.Leader {
		t.Errorf("Mode() of leadership = %v, want leader", lead.Mode())
	}
	if info, err := b.Leader(ctx, name); err != nil || info.Value != "a" || info.Token != lead.Token() {
		t.Errorf("Leader() = %+v, %v; want %q with token %d", info, err, "a", lead.Token())
	}
	mustFail(t, ctx, func() (*dlock.Lease, error) { return b.TryCampaign(ctx, name, "b") }, "TryCampaign while another leads")

	// A candidate waiting in Campaign leads once the leader resigns, and a
	// TryCampaign fails while it leads.
	wctx, cancel := context.WithTimeout(ctx, s.lossBound())
	defer cancel()
	waiting := startWaiter(func() (*dlock.Lease, error) { return c.Campaign(wctx, name, "c") })
	time.Sleep(min(s.h.TTL/10, 200*time.Millisecond)) // let c queue where the backend queues
	release(t, ctx, lead)
	// The resigned leader's TTL is holdTTL: only its resignation can let
	// c lead within the bound, which only ends a hang.
	cl := waiting.next(t, wctx, time.Now(), "the waiting candidate", "the leader resigned", "Campaign waiting while a leader resigned")
	mustFail(t, ctx, func() (*dlock.Lease, error) { return b.TryCampaign(ctx, name, "b") }, "TryCampaign while the next leader leads")
	release(t, ctx, cl)

	// A failed TryCampaign left nothing queued: nobody leads now.
	if info, err := b.Leader(ctx, name); err != nil || info != (dlock.LeaderInfo{}) {
		t.Errorf("Leader() after the leaders resigned = %+v, %v; want nobody: a failed TryCampaign must not queue", info, err)
	}
	next := mustAcquire(t, func() (*dlock.Lease, error) { return b.TryCampaign(ctx, name, "b") }, "TryCampaign once nobody leads")
	if next.Token() <= cl.Token() || cl.Token() <= lead.Token() {
		t.Errorf("tokens %d, %d, %d in the order of leadership: want them increasing", lead.Token(), cl.Token(), next.Token())
	}
	release(t, ctx, next)
}

// electionObserve: an observer sees nobody, then the first leader, then
// the next after a resignation, then another after the leader's loss (a
// crash, or a TTL that ran out without renewal); consecutive values
// differ. The channel closes when the observer's ctx ends, and when its
// Locker closes.
func (s *suite) electionObserve(t *testing.T, ctx context.Context, name string) {
	o := s.locker(t)
	if s.noElection(t, ctx, o, name) {
		return
	}
	octx, stopObserving := context.WithCancel(ctx)
	defer stopObserving()
	ch, err := o.Observe(octx, name)
	if err != nil {
		t.Fatalf("Observe: %v", err)
	}
	w := &watcher{t: t, ch: ch, limit: s.lossBound()}
	w.await("nobody leads", func(i dlock.LeaderInfo) bool { return i == dlock.LeaderInfo{} })

	a, b, c := s.locker(t), s.locker(t), s.locker(t)
	la := mustAcquire(t, func() (*dlock.Lease, error) { return a.Campaign(ctx, name, "a") }, "Campaign")
	w.await("a leads", func(i dlock.LeaderInfo) bool { return i == dlock.LeaderInfo{Value: "a", Token: la.Token()} })

	// b and c campaign while a leads. Whichever is elected after a
	// resigns (the first to arrive, on a backend that queues candidates)
	// then stops: it crashes, or it never renews. The other must follow.
	var opts []dlock.Option
	if s.h.Crash == nil {
		opts = append(opts, dlock.WithAutoRenew(false))
	}
	type result struct {
		l     *dlock.Locker
		value string
		lease *dlock.Lease
		err   error
	}
	results := make(chan result, 2)
	for _, cand := range []result{{l: b, value: "b"}, {l: c, value: "c"}} {
		go func() {
			cand.lease, cand.err = cand.l.Campaign(ctx, name, cand.value, opts...)
			results <- cand
		}()
		time.Sleep(min(s.h.TTL/2, 250*time.Millisecond)) // queued before the next
	}
	next := func(after string) result {
		t.Helper()
		select {
		case r := <-results:
			if r.err != nil {
				t.Fatalf("Campaign of %s: %v", r.value, r.err)
			}
			return r
		case <-time.After(w.limit):
			t.Fatalf("no candidate was elected %s", after)
		}
		panic("unreachable")
	}
	release(t, ctx, la)
	first := next("after a resigned")
	w.await(first.value+" leads after a resigned", func(i dlock.LeaderInfo) bool {
		return i == dlock.LeaderInfo{Value: first.value, Token: first.lease.Token()}
	})
	if s.h.Crash != nil {
		s.h.Crash(t, first.l)
	}
	second := next("after the first successor stopped")
	if second.lease.Token() <= first.lease.Token() {
		t.Errorf("%s's token %d is not greater than %s's %d", second.value, second.lease.Token(), first.value, first.lease.Token())
	}
	w.await(second.value+" leads after "+first.value+"'s loss", func(i dlock.LeaderInfo) bool {
		return i == dlock.LeaderInfo{Value: second.value, Token: second.lease.Token()}
	})
	if !closedWithin(first.lease.Done(), w.limit) {
		t.Errorf("%s's leadership did not end after it stopped", first.value)
	} else if !errors.Is(first.lease.Err(), dlock.ErrLost) {
		t.Errorf("Err() of %s's leadership after it stopped = %v, want ErrLost", first.value, first.lease.Err())
	}
	if info, err := o.Leader(ctx, name); err != nil || info.Value != second.value {
		t.Errorf("Leader() = %+v, %v; want %s", info, err, second.value)
	}
	release(t, ctx, second.lease)
	w.await("nobody leads after c resigned", func(i dlock.LeaderInfo) bool { return i == dlock.LeaderInfo{} })

	stopObserving()
	w.await("the channel closed after the observer's ctx ended", nil)

	// Closing the observer's Locker closes the channel too.
	o2 := s.locker(t)
	ch2, err := o2.Observe(ctx, name)
	if err != nil {
		t.Fatalf("Observe: %v", err)
	}
	_ = o2.Close()
	w2 := &watcher{t: t, ch: ch2, limit: w.limit}
	w2.await("the channel closed after its Locker closed", nil)
}

// watcher reads an Observe channel and checks that consecutive values
// differ.
type watcher struct {
	t     *testing.T
	ch    <-chan dlock.LeaderInfo
	limit time.Duration
	seen  []dlock.LeaderInfo
}

// await reads values until one satisfies want or, when want is nil,
// until the channel closes.
func (w *watcher) await(what string, want func(dlock.LeaderInfo) bool) {
	w.t.Helper()
	deadline := time.After(w.limit)
	for {
		select {
		case v, ok := <-w.ch:
			if !ok {
				if want == nil {
					return
				}
				w.t.Fatalf("waiting until %s: the Observe channel closed (seen %+v)", what, w.seen)
			}
			if n := len(w.seen); n > 0 && w.seen[n-1] == v {
				w.t.Errorf("Observe sent %+v twice in a row; consecutive values must differ", v)
			}
			w.seen = append(w.seen, v)
			if want != nil && want(v) {
				return
			}
		case <-deadline:
			w.t.Fatalf("Observe did not report that %s within %v (seen %+v)", what, w.limit, w.seen)
		}
	}
}
