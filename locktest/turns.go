package locktest

import (
	"context"
	"sync"
	"testing"

	"github.com/dlockgo/dlock"
)

// Turns is a crowd of goroutines taking one lock in turn, for the
// backends' many-waiters tests; see StartTurns.
type Turns struct {
	t       *testing.T
	n       int
	done    chan struct{}
	holders gauge

	mu     sync.Mutex
	tokens []uint64 // in the order of grants
}

// StartTurns starts n goroutines; the i-th acquires name through
// lockers[i%len(lockers)] under ctx, records its token while it holds the
// lock, and releases it at once. An Acquire or Release that fails fails t.
// Start them while another client holds the lock, so that they all wait.
func StartTurns(t *testing.T, ctx context.Context, lockers []*dlock.Locker, name string, n int) *Turns {
	tt := &Turns{t: t, n: n, done: make(chan struct{})}
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			lease, err := lockers[i%len(lockers)].Acquire(ctx, name)
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				return
			}
			tt.holders.enter()
			tt.mu.Lock()
			tt.tokens = append(tt.tokens, lease.Token())
			tt.mu.Unlock()
			tt.holders.leave()
			if err := lease.Release(context.WithoutCancel(ctx)); err != nil {
				t.Errorf("waiter %d: release: %v", i, err)
			}
		})
	}
	go func() { wg.Wait(); close(tt.done) }()
	return tt
}

// Done is closed once every goroutine has returned.
func (tt *Turns) Done() <-chan struct{} { return tt.done }

// Granted returns how many of the goroutines have had the lock so far.
func (tt *Turns) Granted() int {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	return len(tt.tokens)
}

// Check, once Done is closed, fails t unless every goroutine had the
// lock, never two at once, with tokens that strictly increase in the
// order of the grants and start above after (the token of the holder
// they waited behind; 0 for none).
func (tt *Turns) Check(after uint64) {
	tt.t.Helper()
	<-tt.done
	if m := tt.holders.max.Load(); m > 1 {
		tt.t.Errorf("%d holders at once", m)
	}
	if len(tt.tokens) != tt.n {
		tt.t.Errorf("%d of %d waiters got the lock", len(tt.tokens), tt.n)
	}
	last := after
	for i, tok := range tt.tokens {
		if tok <= last {
			tt.t.Errorf("grant %d of %d has token %d after %d: not strictly increasing in the order of grants", i, len(tt.tokens), tok, last)
			return
		}
		last = tok
	}
}
