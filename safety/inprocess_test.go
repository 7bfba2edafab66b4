package safety

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/redislock"
)

// freezable is a Redis driver with an in-process pause hook: while its
// client is frozen, Renew blocks (whatever its context says) until the
// freeze ends, as the renewals of a process stopped by a long GC pause or
// a debugger would. Everything else passes through.
type freezable struct {
	*redislock.Driver
	mu     sync.Mutex
	thawed chan struct{} // nil: not frozen
}

func (f *freezable) freeze() {
	f.mu.Lock()
	if f.thawed == nil {
		f.thawed = make(chan struct{})
	}
	f.mu.Unlock()
}

func (f *freezable) thaw() {
	f.mu.Lock()
	if f.thawed != nil {
		close(f.thawed)
		f.thawed = nil
	}
	f.mu.Unlock()
}

func (f *freezable) Renew(ctx context.Context, r driver.Request) (time.Time, error) {
	f.mu.Lock()
	thawed := f.thawed
	f.mu.Unlock()
	if thawed != nil {
		<-thawed
		return time.Time{}, errors.New("frozen past the lease's validity")
	}
	return f.Driver.Renew(ctx, r)
}

// TestInProcessPause is the paused-holder fault with an in-process hook
// instead of SIGSTOP: clients are goroutines of the test, each with a
// Locker of its own over a Redis driver; a holder that has just acquired
// is frozen for three TTLs — its renewals hang and its work stops — then
// carries on and writes with its token, as a paused process would. Its
// lease must report the loss while it is frozen (the holder learns first:
// no unnoticed overlap), and the guard must refuse its late writes.
func TestInProcessPause(t *testing.T) {
	const ttl, hold = 400 * time.Millisecond, 40 * time.Millisecond
	clients, dur := scale(3, 5), scale(3*time.Second, 12*time.Second)
	res := startResource(t, true, "")
	name := fmt.Sprintf("safety-inproc-%d", time.Now().UnixNano())
	var (
		mu     sync.Mutex
		acqs   []Acquisition
		frozen atomic.Int32 // clients frozen so far
		errs   atomic.Int32
	)
	deadline := time.Now().Add(dur)
	var wg sync.WaitGroup
	for id := range clients {
		c := testenv.RedisClient(t)
		d := &freezable{Driver: redislock.NewDriver(c, nil)}
		l, err := dlock.New(d, dlock.WithTTL(ttl))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		wg.Go(func() {
			for round := 0; time.Now().Before(deadline); round++ {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				call := time.Now()
				lease, err := l.Acquire(ctx, name)
				cancel()
				if err != nil {
					errs.Add(1)
					continue
				}
				enter := time.Now()
				// The process runs on while its renewals hang: looks at the
				// lease every 2ms must find it lost before a successor's
				// grant.
				var heldAt atomic.Int64
				heldAt.Store(enter.UnixNano())
				stop := make(chan struct{})
				var looks sync.WaitGroup
				looks.Go(func() {
					for {
						at := time.Now().UnixNano()
						if lease.Err() != nil {
							return
						}
						heldAt.Store(at)
						select {
						case <-stop:
							return
						case <-time.After(2 * time.Millisecond):
						}
					}
				})
				// Client 0 freezes on every third section; the others
				// never do.
				if id == 0 && round%3 == 0 {
					d.freeze()
					frozen.Add(1)
					time.Sleep(3 * ttl)
					d.thaw()
				} else {
					time.Sleep(hold)
				}
				write(t, res, id, lease.Token())
				exit := time.Now()
				lost := lease.Err() != nil
				close(stop)
				looks.Wait()
				if !lost {
					heldAt.Store(exit.UnixNano())
				}
				_ = lease.Release(context.Background())
				a := Acquisition{Client: id, Token: lease.Token(), Call: call.UnixNano(), Enter: enter.UnixNano(), Exit: exit.UnixNano(),
					Released: time.Now().UnixNano(), Lost: lost, HeldAt: heldAt.Load()}
				mu.Lock()
				acqs = append(acqs, a)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	r := Check(acqs, res.writes())
	if CheckLinear(acqs, res.writes(), time.Minute) == porcupine.Illegal {
		r.NotLinearizable = 1
	}
	report(t, "redis", "holder frozen past its TTL (in-process hook)", true, 1, r)
	if frozen.Load() == 0 {
		t.Fatal("client 0 never froze: no fault was injected")
	}
	wantZero(t, r.Unnoticed, "overlaps of which neither holder had been told")
	if r.StillHeld != 0 || r.NotLinearizable != 0 {
		t.Errorf("%d grants while an earlier holder's lease was still seen held; not linearizable: %v", r.StillHeld, r.NotLinearizable != 0)
	}
	wantZero(t, r.Regressions, "token regressions")
	if r.Overlaps > 0 && r.Rejected == 0 {
		t.Errorf("frozen holders overlapped their successors %d times but the guard refused none of their writes", r.Overlaps)
	}
	if n := errs.Load(); n > 0 {
		t.Logf("%d acquire errors", n)
	}
}

// write sends one write to the fenced resource.
func write(t *testing.T, res *resource, client int, token uint64) {
	body := []byte("c=" + strconv.Itoa(client) + "&t=" + strconv.FormatUint(token, 10))
	resp, err := http.Post(res.url(), "application/x-www-form-urlencoded", bytes.NewReader(body))
	if err != nil {
		t.Errorf("write: %v", err)
		return
	}
	resp.Body.Close()
}
