package locktest

import (
	"sync"
	"sync/atomic"
	"testing"
)

// The checks the properties share.

// CheckIncreasing reports tokens that are not greater than the one
// before them (the first five, then a count), and an empty tokens.
func CheckIncreasing(t *testing.T, tokens []uint64) {
	t.Helper()
	if len(tokens) == 0 {
		t.Error("no tokens")
		return
	}
	checkIncreasing(t, tokens, "in the order given")
}

// checkIncreasing reports tokens that are not greater than the one
// before them (the first five, then a count); what says in which order.
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
