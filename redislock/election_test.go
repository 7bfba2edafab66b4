package redislock

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/locktest"
)

// next receives from ch within d.
func next(t *testing.T, ch <-chan driver.LeaderInfo, d time.Duration) (driver.LeaderInfo, time.Time) {
	t.Helper()
	select {
	case info, ok := <-ch:
		if !ok {
			t.Fatal("Observe's channel closed")
		}
		return info, time.Now()
	case <-time.After(d):
		t.Fatalf("no leader change within %v", d)
	}
	panic("unreachable")
}

// TestElection: campaigns through Lockers, Leader, and an observer on
// another driver that sees every change, by message, including the
// expiry of a leader that crashed.
func TestElection(t *testing.T) {
	d := newDriver(t, nil)
	ctx := ctxTimeout(t, 30*time.Second)
	name := "election/main"
	obs := newDriverOn(t, d.client, &Options{Prefix: d.prefix})
	ch, err := obs.Observe(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if info, _ := next(t, ch, messageBound); info != (driver.LeaderInfo{}) {
		t.Fatalf("first value %+v, want no leader", info)
	}
	if info, err := d.Leader(ctx, name); err != nil || info != (driver.LeaderInfo{}) {
		t.Fatalf("Leader before any campaign: %+v, %v", info, err)
	}

	a, b := newLocker(t, d), newLocker(t, d)
	la, err := a.Campaign(ctx, name, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := next(t, ch, messageBound)
	if got.Value != "node-a" || got.Token != la.Token() {
		t.Fatalf("observed %+v, want node-a with token %d", got, la.Token())
	}
	if info, err := a.Leader(ctx, name); err != nil || info != got {
		t.Fatalf("Leader: %+v, %v; want %+v", info, err, got)
	}

	bres := make(chan *dlock.Lease, 1)
	go func() {
		lb, err := b.Campaign(ctx, name, "node-b")
		if err != nil {
			t.Error(err)
		}
		bres <- lb
	}()
	waitKindQueued(t, d, kindRequest(driver.Leader, name, time.Second), 1)
	select {
	case info := <-ch:
		t.Fatalf("a change while nothing changed: %+v", info)
	case <-time.After(100 * time.Millisecond):
	}
	resigned := time.Now()
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lb := <-bres
	if lb == nil {
		t.FailNow()
	}
	got, at := next(t, ch, messageBound)
	if got.Value != "node-b" || got.Token != lb.Token() || got.Token <= la.Token() {
		t.Fatalf("observed %+v, want node-b with token %d > %d", got, lb.Token(), la.Token())
	}
	// The observer does not poll, and node-a's lease (the Locker's TTL,
	// 30 s) could not have expired: within messageBound it was a message.
	if lat := at.Sub(resigned); lat > messageBound {
		t.Errorf("observer learnt of the handoff %v after it: not by message", lat)
	}
	if err := lb.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if got, _ := next(t, ch, messageBound); got != (driver.LeaderInfo{}) {
		t.Fatalf("after the resignation: %+v, want no leader", got)
	}

	// A leader that crashes (never renews): observers learn it when its
	// lease expires, from a timer set to that known expiry.
	ttl := 500 * time.Millisecond
	c := kindRequest(driver.Leader, name, ttl)
	start := time.Now()
	tc := mustLock(t, d, c)
	if got, _ := next(t, ch, messageBound); got.Token != tc || got.Value != c.Value {
		t.Fatalf("observed %+v, want %q with token %d", got, c.Value, tc)
	}
	got, at = next(t, ch, ttl+messageBound)
	if got != (driver.LeaderInfo{}) {
		t.Fatalf("after the leader's expiry: %+v, want no leader", got)
	}
	if after := at.Sub(start); after < ttl-20*time.Millisecond || after > ttl+messageBound {
		t.Errorf("observer saw the expiry %v after the grant, want right after the TTL %v", after, ttl)
	}
}

// TestObserveLatest: a reader that does not read misses intermediate
// leaders but gets the latest, and never the same value twice in a row.
func TestObserveLatest(t *testing.T) {
	d := newDriver(t, nil)
	ctx := ctxTimeout(t, 20*time.Second)
	name := "election/latest"
	ch, err := d.Observe(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	// Not read yet: the first value waits. Five leaders come and go,
	// and a sixth stays.
	leaders := map[driver.LeaderInfo]bool{{}: true}
	for range 5 {
		r := kindRequest(driver.Leader, name, 10*time.Second)
		leaders[driver.LeaderInfo{Value: r.Value, Token: mustLock(t, d, r)}] = true
		mustUnlock(t, d, r)
	}
	last := kindRequest(driver.Leader, name, 10*time.Second)
	tok := mustLock(t, d, last)
	// The first value is the leader at the call (none), or a later one
	// if the changes were read before the reader came.
	first, _ := next(t, ch, messageBound)
	want := driver.LeaderInfo{Value: last.Value, Token: tok}
	if first == want {
		return
	}
	if !leaders[first] {
		t.Errorf("first value %+v was never the leader", first)
	}
	deadline := time.After(2 * time.Second)
	prev := first
	for {
		select {
		case got := <-ch:
			if got == prev {
				t.Fatalf("the same value twice in a row: %+v", got)
			}
			prev = got
			if !leaders[got] && got != want {
				t.Fatalf("received %+v, which was never the leader", got)
			}
			if got == want {
				return
			}
		case <-deadline:
			t.Fatalf("latest value %+v never arrived (last received %+v)", want, prev)
		}
	}
}

// TestObserveEnds: the channel closes when ctx ends or the driver closes,
// and no goroutine is left.
func TestObserveEnds(t *testing.T) {
	before := runtime.NumGoroutine()
	d := newDriver(t, nil)
	ctx := ctxTimeout(t, 20*time.Second)
	octx, cancel := context.WithCancel(ctx)
	observe := func(ctx context.Context, name string) <-chan driver.LeaderInfo {
		ch, err := d.Observe(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		return ch
	}
	ch1, ch2, ch3 := observe(octx, "election/ends"), observe(ctx, "election/ends"), observe(ctx, "election/other")
	cancel()
	drain := func(ch <-chan driver.LeaderInfo, what string) {
		t.Helper()
		timeout := time.After(2 * time.Second)
		for {
			select {
			case _, ok := <-ch:
				if !ok {
					return
				}
			case <-timeout:
				t.Fatalf("%s: channel not closed", what)
			}
		}
	}
	drain(ch1, "ctx ended")
	// The other observer of the same election still works.
	r := kindRequest(driver.Leader, "election/ends", 10*time.Second)
	tok := mustLock(t, d, r)
	for {
		got, _ := next(t, ch2, messageBound)
		if got.Token == tok {
			break
		}
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	drain(ch2, "driver closed")
	drain(ch3, "driver closed")
	if _, err := d.Observe(ctx, "election/ends"); !errors.Is(err, driver.ErrClosed) {
		t.Errorf("Observe after Close: %v, want ErrClosed", err)
	}
	locktest.NoLeak(t, before)
}
