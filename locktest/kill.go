package locktest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
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
	t.Logf("Done closed after the kill returned: %s; expected within %v", percentiles(took), bound)
}

// percentiles sorts took and describes it: p50, p99, max and count.
func percentiles(took []time.Duration) string {
	slices.Sort(took)
	return fmt.Sprintf("p50 %v, p99 %v, max %v (%d runs)", took[len(took)/2], took[len(took)*99/100], took[len(took)-1], len(took))
}

// A DriverKill is the body of the driver-level tests of a backend whose
// locks live with a server connection (PostgreSQL, MySQL): a server-side
// kill of the holding connection is seen at once by the watch of its
// socket (SeenAtOnce) and, with no goroutine of the driver running, by
// the lock's first Check (CheckSeesKill).
type DriverKill struct {
	// Driver takes the locks. Its keep-alive checks must be an hour
	// apart, so that only the socket can explain a loss seen within the
	// tests' hang bound of 2 s.
	Driver interface {
		driver.Driver
		driver.Waiter
	}
	// Requests are the requests to take, by kind; each run sets a new
	// Owner.
	Requests map[string]driver.Request
	// Kill ends, on the server, the connection that holds r's lock. It
	// returns the instant its statement returned, and gone, which reports
	// whether that connection has left the server.
	Kill func(t *testing.T, r driver.Request) (killed time.Time, gone func() bool)
}

// SeenAtOnce takes each request runs times with Lock and kills its
// connection: the loss must be signalled through OnLost within 2 s (over
// 100× what it takes on loopback; the figures are logged), Check must
// report it, and Unlock must fail with ErrNotHeld.
func (k DriverKill) SeenAtOnce(t *testing.T, runs int) {
	for kind, r := range k.Requests {
		t.Run(kind, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			took := make([]time.Duration, 0, runs)
			for i := range runs {
				r.Owner = RandomHex(16)
				// Lock, not TryLock: the last run's session may still be
				// letting its locks go.
				g, err := k.Driver.Lock(ctx, r)
				if err != nil {
					t.Fatal(err)
				}
				lost := checkedLostCh(t, g, kind)
				killed, _ := k.Kill(t, r)
				select {
				case <-lost:
					took = append(took, time.Since(killed))
				case <-time.After(2 * time.Second):
					t.Fatalf("run %d: loss not signalled 2s after the kill", i)
				}
				if err := g.Check(time.Now()); err == nil {
					t.Fatalf("run %d: Check = nil after the loss was signalled", i)
				}
				if err := k.Driver.Unlock(ctx, r); !errors.Is(err, driver.ErrNotHeld) {
					t.Errorf("run %d: Unlock after the kill = %v, want ErrNotHeld", i, err)
				}
			}
			t.Logf("loss signalled after the kill returned: %s", percentiles(took))
		})
	}
}

// CheckSeesKill is for a driver none of whose goroutines watches its
// locks (a holder whose goroutines have not run since the kill): for each
// request, Check allocates nothing while the lock is held; after the kill,
// with the connection gone, no loss is signalled until the first Check,
// which reports it, and signals it; later Checks report the same loss.
func (k DriverKill) CheckSeesKill(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for kind, r := range k.Requests {
		r.Owner = RandomHex(16)
		g, err := k.Driver.TryLock(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		lost := checkedLostCh(t, g, kind)
		if n := testing.AllocsPerRun(1000, func() { _ = g.Check(time.Now()) }); n != 0 {
			t.Errorf("%s: Check allocates %v times per call while held", kind, n)
		}
		_, gone := k.Kill(t, r)
		if !Eventually(5*time.Second, gone) {
			t.Fatalf("%s: the killed connection is still on the server after 5s", kind)
		}
		time.Sleep(10 * time.Millisecond) // the close's FIN has surely arrived
		select {
		case <-lost:
			t.Fatalf("%s: loss signalled with no goroutine watching", kind)
		default:
		}
		err = g.Check(time.Now())
		if err == nil {
			t.Fatalf("%s: first Check after the kill = nil", kind)
		}
		t.Logf("%s: %v", kind, err)
		select {
		case <-lost:
		case <-time.After(2 * time.Second):
			t.Errorf("%s: loss not signalled after Check found it", kind)
		}
		if err2 := g.Check(time.Now()); err2 == nil || err2.Error() != err.Error() {
			t.Errorf("%s: a later Check = %v, want the same loss", kind, err2)
		}
	}
}

// checkedLostCh checks that g, the grant of kind's lock, has a Check that
// finds the lock held, and returns LostCh(g).
func checkedLostCh(t *testing.T, g driver.Grant, kind string) <-chan struct{} {
	t.Helper()
	lost := LostCh(g)
	if g.Check == nil {
		t.Fatalf("%s: Grant.Check is nil", kind)
	}
	if err := g.Check(time.Now()); err != nil {
		t.Fatalf("%s: Check of a held lock = %v", kind, err)
	}
	return lost
}
