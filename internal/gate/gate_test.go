package gate

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlockgo/dlock/driver"
)

// Waiters get the slot in order of arrival, each with what the one
// before left; one whose context ends leaves the queue at once; done
// ends every queued wait; the last to leave has what it left discarded,
// and the gate is gone.
func TestSet(t *testing.T) {
	var discarded []int
	s := &Set[int]{Discard: func(v int) { discarded = append(discarded, v) }}
	ctx := context.Background()
	first, err := s.Enter(ctx, "k", nil)
	if err != nil {
		t.Fatal(err)
	}
	const n = 5
	order := make(chan int, n)
	for i := range n {
		go func() {
			g, err := s.Enter(ctx, "k", nil)
			if err != nil {
				t.Error(err)
				return
			}
			order <- g.Take()
			g.Leave(i + 1)
		}()
		// Arrival order is the order of Enter calls.
		for !queued(s, "k", i+2) {
			time.Sleep(time.Millisecond)
		}
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := s.Enter(short, "k", nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Enter = %v, want DeadlineExceeded", err)
	}
	done := make(chan struct{})
	close(done)
	if _, err := s.Enter(ctx, "k", done); !errors.Is(err, driver.ErrClosed) {
		t.Errorf("Enter after done = %v, want ErrClosed", err)
	}
	first.Leave(0)
	for i := range n {
		if v := <-order; v != i {
			t.Errorf("waiter %d took %d, want %d (the order of arrival)", i, v, i)
		}
	}
	for !queued(s, "k", 0) {
		time.Sleep(time.Millisecond)
	}
	if len(discarded) != 1 || discarded[0] != n {
		t.Errorf("discarded %v, want [%d]", discarded, n)
	}
}

// queued reports whether key's gate has n waiters (0: no gate).
func queued(s *Set[int], key string, n int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.m[key]
	if g == nil {
		return n == 0
	}
	return g.refs == n
}
