package locktest

import (
	"sync"

	"github.com/dlockgo/dlock/driver"
)

// LostCh returns a channel that closes when the driver reports g's lock
// lost through g.OnLost, for tests that use a driver directly and wait on
// the loss. It makes g's one OnLost call, so g must not also be given to
// dlock. The channel is nil (it never closes) when g has no OnLost.
func LostCh(g driver.Grant) <-chan struct{} {
	if g.OnLost == nil {
		return nil
	}
	ch := make(chan struct{})
	var once sync.Once
	g.OnLost(func() { once.Do(func() { close(ch) }) })
	return ch
}
