package mysqllock

import "time"

// Freeze pauses the driver's keep-alive checks for dur, as if its process
// had stopped (SIGSTOP) or its host had vanished: the connections stay
// open, but the server hears nothing on them.
func (d *Driver) Freeze(dur time.Duration) {
	ch := make(chan struct{})
	d.pool.Hooks.Freeze.Store(&ch)
	time.AfterFunc(dur, func() {
		d.pool.Hooks.Freeze.CompareAndSwap(&ch, nil)
		close(ch)
	})
}

// WaitStep returns the driver's wait step.
func (d *Driver) WaitStep() time.Duration { return d.waitStep }

// KeepAlive returns the driver's keep-alive period.
func (d *Driver) KeepAlive() time.Duration { return d.keepAlive }

// Held returns the number of locks the driver holds.
func (d *Driver) Held() int {
	_, n := d.pool.Len()
	return n
}

// NoWatch stops the driver from starting the watch goroutine of the locks
// it grants from now on (on is true), so that only Check can learn of
// their loss from the socket: a holder whose goroutines have not run.
func NoWatch(d *Driver, on bool) { d.pool.Hooks.TimerKeeper.Store(on) }

// SetOpenTimeout sets the bound of Open's first connection, and returns a
// function that restores it.
func SetOpenTimeout(d time.Duration) (restore func()) {
	old := openTimeout
	openTimeout = d
	return func() { openTimeout = old }
}

// Sessions returns the number of the driver's sessions.
func Sessions(d *Driver) int {
	n, _ := d.pool.Len()
	return n
}

// Occupy takes the use of the session holding owner's lock, as a
// keep-alive check stuck on a silent server would, until the returned
// function is called.
func Occupy(d *Driver, owner string) (free func()) {
	return d.pool.Held(owner).S.Occupy()
}
