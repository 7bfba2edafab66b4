package memlock

import (
	"context"

	"github.com/dlockgo/dlock/driver"
)

// Resume implements driver.Resumer: a lock lives in the Store, not in the
// Driver that took it, so any Driver on the same Store with the
// acquisition's owner value may refresh and release. It refreshes the
// lock, owner-checked, as Refresh does; a lock that expired or passed to
// another owner is left as it is.
func (d *Driver) Resume(ctx context.Context, r driver.Request) (driver.Grant, error) {
	return driver.ResumeByRefresh(ctx, d, r)
}

var _ driver.Resumer = (*Driver)(nil)
