package fence

import (
	"context"
	"fmt"
	"sync"
)

// Memory is a Guard for resources that live in the memory of one process:
// it keeps the highest token admitted for each resource name, an entry per
// name for as long as it lives (Forget drops one). The zero value is
// ready to use. A Memory is safe for concurrent use and must not be copied.
type Memory struct {
	mu sync.Mutex
	m  map[string]*entry
}

type entry struct {
	mu      sync.Mutex // held while a Do operation runs
	highest uint64
}

// entry returns the resource's entry, creating it.
func (g *Memory) entry(resource string) *entry {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.m == nil {
		g.m = map[string]*entry{}
	}
	e := g.m[resource]
	if e == nil {
		e = &entry{}
		g.m[resource] = e
	}
	return e
}

// admitLocked checks token against e and records it. e.mu must be held.
func (e *entry) admitLocked(resource string, token uint64) error {
	if token == 0 {
		return fmt.Errorf("%w (resource %q)", ErrInvalidToken, resource)
	}
	if token < e.highest {
		return &StaleError{Resource: resource, Token: token, Highest: e.highest}
	}
	e.highest = token
	return nil
}

// Admit implements Guard: it accepts token if it is at least the highest
// token admitted for resource, and records it. ctx is not used: the check
// never blocks for long.
func (g *Memory) Admit(_ context.Context, resource string, token uint64) error {
	e := g.entry(resource)
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.admitLocked(resource, token)
}

// Do admits token for resource (see Admit) and, if it is admitted, runs
// op while no other operation on resource runs through this guard, so
// that a holder with a higher token cannot be admitted between the check
// and the write. The token is recorded even when op fails. Do returns the
// *StaleError without running op when the token is stale, else op's
// error.
func (g *Memory) Do(ctx context.Context, resource string, token uint64, op func() error) error {
	e := g.entry(resource)
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.admitLocked(resource, token); err != nil {
		return err
	}
	return op()
}

// Highest returns the highest token admitted for resource; 0 if none.
func (g *Memory) Highest(resource string) uint64 {
	g.mu.Lock()
	e := g.m[resource]
	g.mu.Unlock()
	if e == nil {
		return 0
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.highest
}

// Forget drops what the guard knows of resource: the next token for it is
// admitted whatever its value. Call it only when the resource itself is
// gone.
func (g *Memory) Forget(resource string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.m, resource)
}

var _ Guard = (*Memory)(nil)
