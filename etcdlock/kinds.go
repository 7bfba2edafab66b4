package etcdlock

import "github.com/dlockgo/dlock/driver"

// Supports implements driver.Moder: in LayoutDlock the driver takes every
// kind of lock, the mutex, both sides of readers-writer locks, semaphore
// permits and election leadership; in LayoutConcurrency, the mutex and
// election leadership only.
func (d *Driver) Supports(m driver.Mode) bool { return d.f.supports(m) }

// UnsupportedReason says why the driver lacks mode m ("" when it has it):
// dlock adds it to the error of a request for that mode.
func (d *Driver) UnsupportedReason(m driver.Mode) string {
	if d.f.supports(m) {
		return ""
	}
	return d.f.unsupported()
}

var _ driver.Unsupporter = (*Driver)(nil)
