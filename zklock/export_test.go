package zklock

import "time"

func init() { hooked.Store(true) }

// Crash makes the driver stop as a crashed process would: its TCP
// connection drops and no new one can be made, so its session is neither
// closed nor kept alive, and the ensemble expires it after its timeout.
func (d *Driver) Crash() {
	d.hooks().refuse.Store(true)
	d.Drop()
}

// Wakeups returns how many watch notifications the driver's waiters got.
func (d *Driver) Wakeups() int64 { return d.hooks().wakeups.Load() }

// Listings returns how many child listings the driver's acquisitions made.
func (d *Driver) Listings() int64 { return d.hooks().listings.Load() }

// Waiting returns how many of the driver's waiters have their watch set.
func (d *Driver) Waiting() int64 { return d.hooks().waiting.Load() }

// SessionInfo returns the current session's id, the timeout the server
// granted, and the wall-clock instant at which the driver last knew the
// ensemble heard from it.
func (d *Driver) SessionInfo() (id int64, granted time.Duration, heard time.Time) {
	s := d.current()
	if s == nil {
		return 0, 0, time.Time{}
	}
	return s.id.Load(), time.Duration(s.granted.Load()), s.start.Add(time.Duration(s.heard.Load()))
}

// ErrNoContact is the cause of a session whose validity ran out.
var ErrNoContact = errNoContact

// ValidUntil returns the end of the current session's validity, on the
// monotonic clock: Grant.Check fails from that instant on.
func (d *Driver) ValidUntil() time.Time {
	s := d.current()
	if s == nil {
		return time.Time{}
	}
	return s.start.Add(time.Duration(s.valid.Load()))
}

// LockNodes returns the lock nodes among names, of every kind, in queue
// order, as layout l reads them.
func LockNodes(l Layout, names []string) []string {
	f, err := formatOf(l)
	if err != nil {
		panic(err)
	}
	var out []string
	for _, c := range f.children(names) {
		out = append(out, c.name)
	}
	return out
}

// Drop cuts the driver's TCP connection, as a network fault would: the
// zk.Conn reconnects and keeps the session.
func (d *Driver) Drop() {
	s := d.current()
	if s == nil {
		return
	}
	s.mu.Lock()
	c := s.tcp
	s.mu.Unlock()
	if c != nil {
		_ = c.Close()
	}
}

// Zxid returns the newest zxid the current session's replies carried.
func (d *Driver) Zxid() int64 {
	s := d.current()
	if s == nil {
		return 0
	}
	return s.zxid.Load()
}

// SetZxid sets the zxid the current session sends at its next handshake.
func (d *Driver) SetZxid(z int64) {
	s := d.current()
	s.zxid.Store(z)
}

// current returns the driver's session, nil if it has none.
func (d *Driver) current() *session {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.sess
}
