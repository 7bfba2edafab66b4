package dlock

import (
	"context"
	"sync"
)

// heldContext is the context of Lease.Context and MultiLease.Context: a
// copy of its parent, cancelled when the lease ends, whose Err and Value
// (through which context.Cause reads the cause) first ask the lease, so
// that a loss shows at the first look, even before supervision has run.
type heldContext struct {
	context.Context // from context.WithCancelCause(parent)
	cancel          context.CancelCauseFunc
	held            func() error // the lease's Err
}

// newHeldContext returns parent's copy for a lease whose end closes done
// and whose Err is held.
func newHeldContext(parent context.Context, done <-chan struct{}, held func() error) (context.Context, context.CancelFunc) {
	inner, cancel := context.WithCancelCause(parent)
	c := &heldContext{Context: inner, cancel: cancel, held: held}
	var wg sync.WaitGroup
	wg.Go(func() {
		select {
		case <-done:
			cancel(held())
		case <-inner.Done():
		}
	})
	return c, func() { cancel(context.Canceled); wg.Wait() }
}

// Err returns the parent's or the lease's end, at the call.
func (c *heldContext) Err() error {
	if c.Context.Err() == nil {
		if err := c.held(); err != nil {
			c.cancel(err)
		}
	}
	return c.Context.Err()
}

// Value looks at the lease first: context.Cause finds the context's cause
// through Value.
func (c *heldContext) Value(key any) any {
	c.Err()
	return c.Context.Value(key)
}
