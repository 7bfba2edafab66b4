package redislock

import "github.com/dlockgo/dlock/driver"

// keysFor returns the keys of r's lock, in the scripts' KEYS order.
func (d *Driver) keysFor(r driver.Request) []string {
	return d.format.kinds[r.Mode].keys(d.prefix, r.Name)
}

// keys returns the keys of the mutex name.
func (d *Driver) keys(name string) []string { return d.keysFor(driver.Request{Name: name}) }

// plainKeys returns the lock key and the fencing counter of the mutex
// name in LayoutRedsync.
func (d *Driver) plainKeys(name string) (lock, fence string) {
	k := d.keys(name)
	return k[0], k[1]
}
