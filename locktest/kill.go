package locktest

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/dlockgo/dlock"
)

// ServerKill is the check, for a backend whose locks live with a
// connection (PostgreSQL, MySQL), that a lease learns of a server-side
// kill of that connection by the connection itself, not by a later
// renewal or keep-alive: runs times, it acquires the mutex name with l,
// with a TTL of an hour (renewals 20 minutes apart), calls kill (which
// ends the holder's session on the server and returns the instant its
// statement returned), and waits for the lease's Done; Err must then
// match dlock.ErrLost. l's keep-alives must be as rare (an hour): then
// only the watch of the connection can close Done within the wait, which
// is ten times bound and 5 s at least — a hang bound. bound is how soon
// Done is expected to close; it logs p50, p99 and max against it, figures
// that a loaded machine may stretch.
func ServerKill(t *testing.T, l *dlock.Locker, name string, runs int, bound time.Duration,
	kill func(t *testing.T, lease *dlock.Lease) time.Time) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	hang := max(10*bound, 5*time.Second)
	took := make([]time.Duration, 0, runs)
	for i := range runs {
		// Acquire, not TryAcquire: the last run's session may still be
		// letting its locks go.
		lease, err := l.Acquire(ctx, name, dlock.WithTTL(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		killed := kill(t, lease)
		select {
		case <-lease.Done():
			took = append(took, time.Since(killed))
		case <-time.After(hang):
			t.Fatalf("run %d: Done not closed %v after the holder's connection was killed, with renewals 20 minutes apart", i, hang)
		}
		if err := lease.Err(); !errors.Is(err, dlock.ErrLost) {
			t.Errorf("run %d: Err after the kill = %v, want ErrLost", i, err)
		}
	}
	slices.Sort(took)
	t.Logf("Done closed after the kill returned: p50 %v, p99 %v, max %v (%d runs; expected within %v)",
		took[len(took)/2], took[len(took)*99/100], took[len(took)-1], len(took), bound)
}
