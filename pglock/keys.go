package pglock

import "github.com/dlockgo/dlock/driver"

// A keyState is what the driver knows of one advisory key locally: the
// locks it holds on it and the acquisitions under way, so that it never
// asks a session for a key that this driver already holds, answers a try
// at once when the key is taken here, and lets one Lock at a time wait on
// the server for it while the others wait in the process.
type keyState struct {
	n      int  // holds and acquisitions under way
	shared bool // all n are readers
	// writer is set while a Lock that conflicts with readers waits for
	// the key: a reader's try then fails here, as on the server behind a
	// waiting writer.
	writer bool
	// gate is held by the one Lock of the key that may wait; the others
	// wait to fill it.
	gate chan struct{}
	// changed, when not nil, is closed when n next drops.
	changed chan struct{}
	refs    int // Locks using gate
}

// conflicts reports whether a lock of mode m must wait for what the
// driver holds or asks for on the key.
func (k *keyState) conflicts(m driver.Mode) bool {
	if m == driver.Read {
		return k.writer || (k.n > 0 && !k.shared)
	}
	return k.n > 0
}

// reserveKeyLocked counts an acquisition of mode m of key under way, or
// returns false when it conflicts with what the driver has; Driver.mu is
// held.
func (d *Driver) reserveKeyLocked(key int64, m driver.Mode) bool {
	k := d.keyLocked(key)
	if k.conflicts(m) {
		return false
	}
	if k.n == 0 {
		k.shared = true
	}
	k.n++
	k.shared = k.shared && m == driver.Read
	return true
}

// dropKeyLocked undoes one reserveKeyLocked (a hold ended, or an
// acquisition failed), and wakes the Lock waiting for the key.
func (d *Driver) dropKeyLocked(key int64) {
	k := d.keys[key]
	if k == nil {
		return
	}
	k.n--
	if k.changed != nil {
		close(k.changed)
		k.changed = nil
	}
	d.tidyKeyLocked(key, k)
}

// keyLocked returns the state of key, made if needed; Driver.mu is held.
func (d *Driver) keyLocked(key int64) *keyState {
	k := d.keys[key]
	if k == nil {
		k, d.spareKey = d.spareKey, nil
		if k == nil {
			k = &keyState{}
		}
		d.keys[key] = k
	}
	return k
}

// tidyKeyLocked forgets k, the state of key, once nothing uses it, and
// keeps it as the spare (see Driver.spareKey); Driver.mu is held.
func (d *Driver) tidyKeyLocked(key int64, k *keyState) {
	if k.n != 0 || k.refs != 0 || k.writer {
		return
	}
	delete(d.keys, key)
	if d.spareKey == nil && k.changed == nil {
		k.shared = false
		d.spareKey = k // its gate, if any, is empty: no Lock uses it
	}
}
