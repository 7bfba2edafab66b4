package locktest

import (
	"context"
	"runtime"
	"sync"
	"testing"
)

// Contenders and rounds of the MutualExclusion property.
const (
	contenders = 16
	rounds     = 25
)

// mutualExclusion runs 16 goroutines over 4 clients that take one lock
// many times; a holders gauge must never exceed 1, and the tokens, in the
// order the critical sections ran, must strictly increase.
func (s *suite) mutualExclusion(t *testing.T, ctx context.Context, name string) {
	lockers := s.lockers(t, 4)
	var (
		held   gauge
		mu     sync.Mutex
		tokens []uint64
		wg     sync.WaitGroup
		fail   firstError
	)
	for g := range contenders {
		wg.Go(func() {
			l := lockers[g%len(lockers)]
			for range rounds {
				lease, err := l.Acquire(ctx, name)
				if err != nil {
					fail.report(t, "Acquire under contention: %v", err)
					return
				}
				held.enter()
				mu.Lock()
				tokens = append(tokens, lease.Token())
				mu.Unlock()
				runtime.Gosched()
				held.leave()
				if err := lease.Release(ctx); err != nil {
					t.Errorf("Release under contention: %v", err)
				}
			}
		})
	}
	wg.Wait()
	if m := held.max.Load(); m > 1 {
		t.Errorf("holders gauge reached %d: mutual exclusion broken", m)
	}
	if want := contenders * rounds; len(tokens) != want && fail.count() == 0 {
		t.Errorf("%d critical sections ran, want %d", len(tokens), want)
	}
	checkIncreasing(t, tokens, "in critical-section order")
}

// tokensIncrease takes a lock many times in turn from three clients; the
// tokens must strictly increase.
func (s *suite) tokensIncrease(t *testing.T, ctx context.Context, name string) {
	lockers := s.lockers(t, 3)
	var tokens []uint64
	for i := range 60 {
		lease := TakeTurn(t, ctx, lockers, i, name)
		tokens = append(tokens, lease.Token())
		release(t, ctx, lease)
	}
	// A lock taken away and taken again still gets a greater token.
	lease := acquire(t, ctx, lockers[0], name)
	tokens = append(tokens, lease.Token())
	s.h.TakeAway(t, name)
	lease2 := acquire(t, ctx, lockers[1], name)
	tokens = append(tokens, lease2.Token())
	release(t, ctx, lease2)
	_ = lease.Release(ctx)
	checkIncreasing(t, tokens, "across successive acquisitions")
}

func checkIncreasing(t *testing.T, tokens []uint64, what string) {
	t.Helper()
	bad := 0
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			if bad < 5 {
				t.Errorf("token %d (#%d) is not greater than token %d (#%d) %s", tokens[i], i, tokens[i-1], i-1, what)
			}
			bad++
		}
	}
	if bad > 5 {
		t.Errorf("... %d tokens out of order in all", bad)
	}
}
