package gate

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlockgo/dlock/driver"
)

// One waiter at a time is through a key's gate; the others pass in turn,
// other keys are not held up, and an empty gate is dropped.
func TestOneThrough(t *testing.T) {
	var s Set
	ctx := t.Context()
	never := make(chan struct{})
	leave, err := s.Enter(ctx, "a", never)
	if err != nil {
		t.Fatal(err)
	}
	entered := make(chan func())
	go func() {
		l, err := s.Enter(ctx, "a", never)
		if err != nil {
			t.Error(err)
		}
		entered <- l
	}()
	other, err := s.Enter(ctx, "b", never)
	if err != nil {
		t.Fatal(err)
	}
	other()
	select {
	case <-entered:
		t.Fatal("a second waiter went through while the first was")
	case <-time.After(50 * time.Millisecond):
	}
	leave()
	(<-entered)()
	if n := s.Len(); n != 0 {
		t.Errorf("%d gates left with nobody at them", n)
	}
}

// A queued waiter leaves with ctx's error or ErrClosed.
func TestQueuedEnds(t *testing.T) {
	var s Set
	closed := make(chan struct{})
	leave, err := s.Enter(t.Context(), "a", closed)
	if err != nil {
		t.Fatal(err)
	}
	defer leave()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	if _, err := s.Enter(ctx, "a", closed); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Enter past its deadline = %v, want DeadlineExceeded", err)
	}
	close(closed)
	if _, err := s.Enter(t.Context(), "a", closed); !errors.Is(err, driver.ErrClosed) {
		t.Errorf("Enter after close = %v, want ErrClosed", err)
	}
	if n := s.Len(); n != 1 {
		t.Errorf("%d gates, want the one still held", n)
	}
}
