package fence_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/dlockgo/dlock/fence"
)

func TestStaleTokenRejectedWithBothTokens(t *testing.T) {
	var g fence.Memory
	ctx := context.Background()
	if err := g.Admit(ctx, "stock", 7); err != nil {
		t.Fatalf("Admit(7) on a new resource: %v", err)
	}
	if err := g.Admit(ctx, "stock", 7); err != nil {
		t.Fatalf("Admit(7) again (same holder, second write): %v", err)
	}
	err := g.Admit(ctx, "stock", 5)
	if !errors.Is(err, fence.ErrStale) {
		t.Fatalf("Admit(5) after 7: got %v, want ErrStale", err)
	}
	se, ok := errors.AsType[*fence.StaleError](err)
	if !ok {
		t.Fatalf("Admit(5) after 7: %T is not a *StaleError", err)
	}
	if se.Token != 5 || se.Highest != 7 || se.Resource != "stock" {
		t.Fatalf("StaleError = %+v, want Resource stock, Token 5, Highest 7", *se)
	}
	if h := g.Highest("stock"); h != 7 {
		t.Fatalf("Highest after a rejection = %d, want 7 (a stale token is not recorded)", h)
	}
	if err := g.Admit(ctx, "other", 1); err != nil {
		t.Fatalf("resources are independent: Admit(other, 1): %v", err)
	}
	if err := g.Admit(ctx, "stock", 0); !errors.Is(err, fence.ErrInvalidToken) {
		t.Fatalf("Admit(0): got %v, want ErrInvalidToken", err)
	}
}

func TestDoDoesNotRunStaleOperations(t *testing.T) {
	var g fence.Memory
	ctx := context.Background()
	ran := 0
	op := func() error { ran++; return nil }
	if err := g.Do(ctx, "r", 10, op); err != nil {
		t.Fatal(err)
	}
	if err := g.Do(ctx, "r", 9, op); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("Do(9) after 10: got %v, want ErrStale", err)
	}
	if ran != 1 {
		t.Fatalf("op ran %d times, want 1 (never for the stale token)", ran)
	}
	boom := errors.New("boom")
	if err := g.Do(ctx, "r", 11, func() error { return boom }); err != boom {
		t.Fatalf("Do returns op's error: got %v", err)
	}
	if h := g.Highest("r"); h != 11 {
		t.Fatalf("Highest = %d, want 11: an admitted token is recorded even when op fails", h)
	}
}

// TestConcurrentDo runs many writers with random tokens through one guard.
// The writes that are admitted must reach the resource in non-decreasing
// token order, every rejection must carry the rejected token and a higher
// one, and admitted plus rejected must account for every call.
func TestConcurrentDo(t *testing.T) {
	var g fence.Memory
	ctx := context.Background()
	const writers, each = 8, 2000
	var (
		mu       sync.Mutex // guards applied and rejected
		applied  []uint64
		rejected int
		wg       sync.WaitGroup
	)
	for w := range writers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 42))
			for range each {
				tok := 1 + r.Uint64N(1000)
				err := g.Do(ctx, "res", tok, func() error {
					mu.Lock()
					applied = append(applied, tok)
					mu.Unlock()
					return nil
				})
				if err != nil {
					se, ok := errors.AsType[*fence.StaleError](err)
					if !ok || se.Token != tok || se.Highest <= tok {
						t.Errorf("Do(%d): unexpected error %v", tok, err)
						return
					}
					mu.Lock()
					rejected++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if len(applied)+rejected != writers*each {
		t.Fatalf("applied %d + rejected %d != %d calls", len(applied), rejected, writers*each)
	}
	if rejected == 0 {
		t.Fatalf("no token was rejected among %d random ones: the guard checks nothing", writers*each)
	}
	for i := 1; i < len(applied); i++ {
		if applied[i] < applied[i-1] {
			t.Fatalf("write %d applied token %d after token %d: a stale write got through", i, applied[i], applied[i-1])
		}
	}
	if h := g.Highest("res"); h != applied[len(applied)-1] {
		t.Fatalf("Highest = %d, want the last applied token %d", h, applied[len(applied)-1])
	}
}

// TestConcurrentAdmit checks Admit's atomicity alone: with tokens handed
// out in increasing order to racing goroutines, the guard's highest must
// end at the largest token, and every rejected token must be below it.
func TestConcurrentAdmit(t *testing.T) {
	var g fence.Memory
	ctx := context.Background()
	var next uint64
	var nmu sync.Mutex
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 1000 {
				nmu.Lock()
				next++
				tok := next
				nmu.Unlock()
				if err := g.Admit(ctx, "res", tok); err != nil && !errors.Is(err, fence.ErrStale) {
					t.Errorf("Admit(%d): %v", tok, err)
				}
			}
		})
	}
	wg.Wait()
	if h := g.Highest("res"); h != 8000 {
		t.Fatalf("Highest = %d, want 8000", h)
	}
}
