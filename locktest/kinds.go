package locktest

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
)

// Helpers shared by the properties of the lock kinds besides the mutex.

// unsupported reports whether l lacks mode m. When it does, it checks
// that attempt — a call of one of the kind's methods — fails with an
// error matching ErrUnsupported: a backend without a kind must say so. A
// lease attempt returns nonetheless is released.
func unsupported(t *testing.T, ctx context.Context, l *dlock.Locker, m driver.Mode, attempt func() (*dlock.Lease, error)) bool {
	t.Helper()
	if l.Supports(m) {
		return false
	}
	lease, err := attempt()
	if err == nil && lease != nil {
		_ = lease.Release(ctx)
	}
	if !errors.Is(err, dlock.ErrUnsupported) {
		t.Errorf("the backend does not support %s locks, but the attempt returned %v, want an error matching ErrUnsupported", m, err)
	}
	return true
}

// gauge counts holders; it remembers the highest count it reached.
type gauge struct {
	n, max atomic.Int32
}

// enter counts one more holder and returns the count.
func (g *gauge) enter() int32 {
	n := g.n.Add(1)
	for {
		m := g.max.Load()
		if n <= m || g.max.CompareAndSwap(m, n) {
			return n
		}
	}
}

func (g *gauge) leave() { g.n.Add(-1) }

// tokenSet records tokens and reports duplicates.
type tokenSet struct {
	mu   sync.Mutex
	seen map[uint64]int
	dups int
	all  int
}

func (s *tokenSet) add(tok uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seen == nil {
		s.seen = map[uint64]int{}
	}
	s.seen[tok]++
	s.all++
	if s.seen[tok] > 1 {
		s.dups++
	}
}

// check fails t if a token was granted twice or a token was 0.
func (s *tokenSet) check(t *testing.T, what string) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dups > 0 {
		t.Errorf("%d of %d %s tokens were granted more than once; every grant needs a token of its own", s.dups, s.all, what)
	}
	if s.seen[0] > 0 {
		t.Errorf("token 0 was granted %d times among %s; 0 is never a token", s.seen[0], what)
	}
}

// firstError reports only the first of many errors from goroutines.
type firstError struct {
	n atomic.Int32
}

func (f *firstError) report(t *testing.T, format string, args ...any) {
	t.Helper()
	if f.n.Add(1) == 1 {
		t.Errorf(format, args...)
	}
}

func (f *firstError) count() int { return int(f.n.Load()) }
