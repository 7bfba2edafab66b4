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
// kill of that connection at once: runs times, it acquires the mutex name
// with l, calls kill (which ends the holder's session on the server and
// returns the instant its statement returned), and waits for the lease's
// Done, which must close within bound of that instant in every run; Err
// must then match dlock.ErrLost. It logs p50, p99 and max.
func ServerKill(t *testing.T, l *dlock.Locker, name string, runs int, bound time.Duration,
	kill func(t *testing.T, lease *dlock.Lease) time.Time) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	took := make([]time.Duration, 0, runs)
	for i := range runs {
		// Acquire, not TryAcquire: the last run's session may still be
		// letting its locks go.
		lease, err := l.Acquire(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		killed := kill(t, lease)
		select {
		case <-lease.Done():
			took = append(took, time.Since(killed))
		case <-time.After(2 * time.Second):
			t.Fatalf("run %d: Done not closed 2s after the holder's connection was killed", i)
		}
		if err := lease.Err(); !errors.Is(err, dlock.ErrLost) {
			t.Errorf("run %d: Err after the kill = %v, want ErrLost", i, err)
		}
	}
	slices.Sort(took)
	t.Logf("Done closed after the kill returned: p50 %v, p99 %v, max %v (%d runs)",
		took[len(took)/2], took[len(took)*99/100], took[len(took)-1], len(took))
	if worst := took[len(took)-1]; worst > bound {
		t.Errorf("the slowest run took %v, want every run within %v", worst, bound)
	}
}
