package harness

import (
	"context"
	"sync"
	"testing"
	"time"
)

// memLock is an in-process lock: one holder, waiters wait on a channel (or
// their context).
type memLock struct {
	sem  chan struct{}
	mu   sync.Mutex
	seen map[string]int // context shapes seen by calls
}

func newMemLock() *memLock { return &memLock{sem: make(chan struct{}, 1), seen: map[string]int{}} }

func shape(ctx context.Context) string {
	_, dl := ctx.Deadline()
	switch {
	case ctx == context.Background():
		return CtxBackground
	case dl:
		return CtxTimeout
	case ctx.Done() != nil:
		return CtxCancel
	}
	return "other"
}

func (m *memLock) note(ctx context.Context) {
	m.mu.Lock()
	m.seen[shape(ctx)]++
	m.mu.Unlock()
}

func (m *memLock) Acquire(ctx context.Context, key string) (Held, error) {
	m.note(ctx)
	select {
	case m.sem <- struct{}{}:
		return memHeld{m}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

type memHeld struct{ m *memLock }

func (h memHeld) Release(ctx context.Context) error {
	h.m.note(ctx)
	<-h.m.sem
	return nil
}

func (m *memLock) Close() error { return nil }

// Every call gets a context of the kind asked for, and S3 ends at its
// budget under every kind: cut off when it can be (cancel, timeout),
// drained and not counted when it cannot (background).
func TestContextKinds(t *testing.T) {
	for _, kind := range CtxKinds {
		t.Run(kind, func(t *testing.T) {
			m := newMemLock()
			for _, sc := range Scenarios {
				r := Run(sc, m, "k", kind, Budget{D: 50 * time.Millisecond}, Hooks{})
				if r.Ctx != kind || r.Scenario != sc || r.Ops == 0 {
					t.Errorf("%s: ctx %q scenario %q ops %d", sc, r.Ctx, r.Scenario, r.Ops)
				}
				if r.ExclusionViolations != 0 || r.ReleaseErrors != 0 {
					t.Errorf("%s: %d overlaps, %d release errors", sc, r.ExclusionViolations, r.ReleaseErrors)
				}
				if r.Elapsed < 50*time.Millisecond || r.Elapsed > time.Second {
					t.Errorf("%s: elapsed %v", sc, r.Elapsed)
				}
			}
			m.mu.Lock()
			defer m.mu.Unlock()
			if len(m.seen) != 1 || m.seen[kind] == 0 {
				t.Errorf("contexts seen %v, want only %s", m.seen, kind)
			}
		})
	}
}

// A count-bounded S3 stops the benchmark timer when the N-th acquisition
// completed, and counts N of them (and those acquired before that moment
// by other workers, at most one each).
func TestS3ByCount(t *testing.T) {
	for _, kind := range CtxKinds {
		m := newMemLock()
		var stopped int
		r := RunS3(m, "k", kind, Budget{N: 500}, Hooks{Start: func() {}, Stop: func() { stopped++ }})
		if r.Ops < 500 || r.Ops > 500+S3Workers || stopped != 1 {
			t.Errorf("%s: ops %d (want 500 to %d), timer stopped %d times", kind, r.Ops, 500+S3Workers, stopped)
		}
	}
}
