package driver

import "sync"

// A LossNotice is a driver's side of Grant.OnLost for one lock: set Grant's
// OnLost to the notice's Set, and call Signal when the lock is gone. The
// function dlock gives is called exactly once, whichever of Set and Signal
// comes first. The zero value is ready to use; a LossNotice must not be
// copied after first use.
type LossNotice struct {
	mu   sync.Mutex
	f    func()
	lost bool
}

// Set records f, dlock's function to call on the loss; when Signal has
// already been called, it calls f at once, on a goroutine of its own.
func (n *LossNotice) Set(f func()) {
	n.mu.Lock()
	lost := n.lost
	if !lost {
		n.f = f
	}
	n.mu.Unlock()
	if lost {
		go f()
	}
}

// Signal tells of the loss: it calls the function Set recorded, if any,
// on the caller's goroutine (which must hold none of the driver's locks),
// and makes a later Set call its own at once. Later calls do nothing.
func (n *LossNotice) Signal() {
	n.mu.Lock()
	f := n.f
	n.f, n.lost = nil, true
	n.mu.Unlock()
	if f != nil {
		f()
	}
}
