package filelock

import (
	"context"
	"time"

	"github.com/dlockgo/dlock/driver"
)

// The files of the readers-writer lock called name, next to its mutex's
// (name + Suffix): the lock, where readers hold LOCK_SH and a writer
// LOCK_EX; the writers' gate, where a waiting writer holds LOCK_EX and a
// reader takes LOCK_SH for an instant to check that no writer waits; and
// the token file, where every grant advances the token under a LOCK_EX
// held for one read and one write. None ends in ".lock", as mutexes do.
const (
	RWSuffix   = ".rwlock"
	GateSuffix = ".rwgate"
	SeqSuffix  = ".rwseq"
)

// Supports implements driver.Moder: the mutex and the readers-writer lock
// (driver.Read and driver.Write), not semaphores or elections.
func (d *Driver) Supports(m driver.Mode) bool {
	return m == driver.Exclusive || m == driver.Read || m == driver.Write
}

// rwToken advances a readers-writer lock's token in its token file path
// under an exclusive flock, tried without blocking, after pauses from 20µs
// doubling to a millisecond, until ctx ends: a holder lets it go within
// microseconds, unless its process is stopped right then.
func (d *Driver) rwToken(ctx context.Context, path string) (uint64, error) {
	lf := lockFile{fd: -1}
	defer lf.close()
	pause := 20 * time.Microsecond
	for {
		ok, err := d.attempt(&lf, path, false)
		if err != nil {
			return 0, err
		}
		if ok {
			break
		}
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		time.Sleep(pause)
		pause = min(2*pause, time.Millisecond)
	}
	defer funlock(lf.fd)
	return d.advance(lf.fd, path)
}
