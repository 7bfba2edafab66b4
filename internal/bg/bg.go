// Package bg counts the goroutines a driver starts on its own behalf (a
// release that outlived its caller's context, the close of a session, a
// keeper), so that the driver's Close can wait for them, boundedly: a
// process that closes its driver and exits must not leave work on its way
// to the store, and a closed driver leaves no goroutine running.
package bg

import (
	"sync"
	"time"
)

// A Group counts goroutines until Wait begins. The zero value is ready to
// use; a Group must not be copied after first use.
type Group struct {
	mu      sync.Mutex
	wg      sync.WaitGroup
	waiting bool // Wait has begun: nothing more is counted
}

// Go runs f on a goroutine of its own, counted unless Wait has begun (f
// then still runs, uncounted: the driver is closing, and whatever f does
// fails or ends at once).
func (g *Group) Go(f func()) {
	done := g.Add()
	go func() {
		defer done()
		f()
	}()
}

// Add counts a goroutine the caller is about to start, or some work it
// hands to one; done marks its end. After Wait has begun, Add counts
// nothing and done does nothing.
func (g *Group) Add() (done func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.waiting {
		return func() {}
	}
	g.wg.Add(1)
	return g.wg.Done
}

// Wait stops the counting and waits for the counted goroutines to end, at
// most d; it reports whether they all did. Calls after the first wait as
// well.
func (g *Group) Wait(d time.Duration) bool {
	g.mu.Lock()
	g.waiting = true
	g.mu.Unlock()
	done := make(chan struct{})
	go func() {
		g.wg.Wait()
		close(done)
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}
