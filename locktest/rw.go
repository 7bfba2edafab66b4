package locktest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
)

// noRW, which every readers-writer property calls first, reports whether
// l lacks the kind, after checking that it then answers ErrUnsupported.
func (s *suite) noRW(t *testing.T, ctx context.Context, l *dlock.Locker, name string) bool {
	if l.Supports(driver.Read) != l.Supports(driver.Write) {
		t.Errorf("Supports(Read) = %v but Supports(Write) = %v: the two sides of a readers-writer lock go together",
			l.Supports(driver.Read), l.Supports(driver.Write))
	}
	unsupported(t, ctx, l, driver.Write, func() (*dlock.Lease, error) { return l.TryAcquireWrite(ctx, name) })
	return unsupported(t, ctx, l, driver.Read, func() (*dlock.Lease, error) { return l.TryAcquireRead(ctx, name) })
}

// rwShareExclude: two readers hold together, and a third joins them; then
// readers and writers contend, and a readers gauge and a writers gauge
// show that a writer never had company (how many readers overlapped is the
// scheduler's choice: logged).
func (s *suite) rwShareExclude(t *testing.T, ctx context.Context, name string) {
	lockers := s.lockers(t, 4)
	if s.noRW(t, ctx, lockers[0], name) {
		return
	}
	r1 := mustAcquire(t, func() (*dlock.Lease, error) { return lockers[0].TryAcquireRead(ctx, name) }, "TryAcquireRead of a free lock")
	if r1.Mode() != driver.Read {
		t.Errorf("Mode() of a read lease = %v, want read", r1.Mode())
	}
	r2 := mustAcquire(t, func() (*dlock.Lease, error) { return lockers[1].TryAcquireRead(ctx, name) },
		"TryAcquireRead while another reader holds (readers must share)")
	// Not waiting; the deadline bounds a wait behind r1 and r2, for ever.
	wctx, cancel := context.WithTimeout(ctx, s.lossBound())
	r3, err := lockers[2].AcquireRead(wctx, name)
	cancel()
	if err != nil {
		t.Errorf("AcquireRead while two readers hold: %v; it must not wait", err)
	} else {
		release(t, ctx, r3)
	}
	if r1.Token() == r2.Token() {
		t.Errorf("two readers holding together have the same token %d", r1.Token())
	}
	release(t, ctx, r1)
	release(t, ctx, r2)

	const readers, readerRounds, writers, writerRounds = 6, 12, 2, 6
	var (
		rg, wg gauge
		tokens tokenSet
		fail   firstError
		all    sync.WaitGroup
	)
	hold := min(s.h.TTL/100, 5*time.Millisecond)
	for i := range readers + writers {
		l := lockers[i%len(lockers)]
		all.Go(func() {
			write := i >= readers
			n, acq := readerRounds, l.AcquireRead
			if write {
				n, acq = writerRounds, l.AcquireWrite
			}
			for range n {
				lease, err := acq(ctx, name)
				if err != nil {
					fail.report(t, "acquire (write=%v) under contention: %v", write, err)
					return
				}
				tokens.add(lease.Token())
				if write {
					if n := wg.enter(); n > 1 {
						fail.report(t, "%d writers held the lock at once", n)
					}
					if n := rg.n.Load(); n > 0 {
						fail.report(t, "a writer held the lock together with %d readers", n)
					}
					time.Sleep(hold)
					wg.leave()
				} else {
					rg.enter()
					if n := wg.n.Load(); n > 0 {
						fail.report(t, "a reader held the lock together with %d writers", n)
					}
					time.Sleep(hold)
					rg.leave()
				}
				if err := lease.Release(ctx); err != nil {
					fail.report(t, "Release under contention: %v", err)
				}
			}
		})
	}
	all.Wait()
	t.Logf("under contention, at most %d readers held together", rg.max.Load())
	tokens.check(t, "readers-writer")
}

// rwTry: TryAcquireRead fails while a writer holds or waits;
// TryAcquireWrite fails while a reader holds; a waiting writer holds back
// readers that come after it. The readers-writer lock "x" is unrelated to
// the mutex "x" (unless Harness.WriteIsMutex says their writers are one).
func (s *suite) rwTry(t *testing.T, ctx context.Context, name string) {
	a, b, c := s.locker(t, dlock.WithTTL(holdTTL)), s.locker(t), s.locker(t)
	if s.noRW(t, ctx, a, name) {
		return
	}
	w := mustAcquire(t, func() (*dlock.Lease, error) { return a.AcquireWrite(ctx, name) }, "AcquireWrite")
	if w.Mode() != driver.Write {
		t.Errorf("Mode() of a write lease = %v, want write", w.Mode())
	}
	mustFail(t, ctx, func() (*dlock.Lease, error) { return b.TryAcquireRead(ctx, name) }, "TryAcquireRead while a writer holds")
	mustFail(t, ctx, func() (*dlock.Lease, error) { return b.TryAcquireWrite(ctx, name) }, "TryAcquireWrite while a writer holds")
	if s.h.WriteIsMutex {
		mustFail(t, ctx, func() (*dlock.Lease, error) { return b.TryAcquire(ctx, name) },
			"TryAcquire of the mutex of the same name, in the same queue, while a writer holds")
	} else {
		mustBeFree(t, ctx, b, name, "the mutex of the same name as a held readers-writer lock")
	}
	if b.Supports(driver.Permit) {
		p := mustAcquire(t, func() (*dlock.Lease, error) { return b.TryAcquirePermit(ctx, name, 1) },
			"TryAcquirePermit of the semaphore of the same name as a held readers-writer lock")
		release(t, ctx, p)
	}
	release(t, ctx, w)

	r := mustAcquire(t, func() (*dlock.Lease, error) { return a.TryAcquireRead(ctx, name) }, "TryAcquireRead after the writer released")
	mustFail(t, ctx, func() (*dlock.Lease, error) { return b.TryAcquireWrite(ctx, name) }, "TryAcquireWrite while a reader holds")

	// A writer queues behind the reader; from then on new readers wait.
	writer := startWaiter(func() (*dlock.Lease, error) { return c.AcquireWrite(ctx, name) })
	writer.mustWait(t, min(s.h.TTL/2, 250*time.Millisecond), "AcquireWrite returned while a reader held the lock", "AcquireWrite while a reader holds")
	mustFail(t, ctx, func() (*dlock.Lease, error) { return b.TryAcquireRead(ctx, name) }, "TryAcquireRead while a writer waits")
	mustTimeOut(t, ctx, s.h.TTL/4, func(ctx context.Context) (*dlock.Lease, error) { return b.AcquireRead(ctx, name) },
		"AcquireRead behind a waiting writer (a waiting writer must hold back later readers)")
	released := time.Now()
	release(t, ctx, r)
	writer.mustFollow(t, ctx, r, released, "the writer", "the reader's release", "reader's", "AcquireWrite after the reader released")
	// The abandoned reader left nothing queued.
	r2 := mustAcquire(t, func() (*dlock.Lease, error) { return b.TryAcquireRead(ctx, name) }, "TryAcquireRead after the writer released")

	// A writer that gives up waiting no longer holds back new readers.
	mustTimeOut(t, ctx, s.h.TTL/4, func(ctx context.Context) (*dlock.Lease, error) { return c.AcquireWrite(ctx, name) },
		"AcquireWrite while a reader holds")
	r3 := mustAcquire(t, func() (*dlock.Lease, error) { return a.TryAcquireRead(ctx, name) },
		"TryAcquireRead after a waiting writer gave up")
	release(t, ctx, r3)
	release(t, ctx, r2)
	release(t, ctx, mustAcquire(t, func() (*dlock.Lease, error) { return a.TryAcquireWrite(ctx, name) },
		"TryAcquireWrite once every reader left"))
}

// rwWriterNotStarved: readers keep arriving, always overlapping, so the
// lock is never free of readers; a writer must still get it (once the
// readers in at its arrival leave: a few holds of 20ms; the bound only
// ends a starved wait).
func (s *suite) rwWriterNotStarved(t *testing.T, ctx context.Context, name string) {
	lockers := s.lockers(t, 3)
	if s.noRW(t, ctx, lockers[0], name) {
		return
	}
	const readers = 4
	hold := 20 * time.Millisecond
	stop, stopReaders := context.WithCancel(ctx)
	defer stopReaders()
	var (
		rg, wg gauge
		fail   firstError
		all    sync.WaitGroup
	)
	for i := range readers {
		l := lockers[i%2]
		all.Go(func() {
			time.Sleep(time.Duration(i) * hold / readers) // stagger: always one holding
			for stop.Err() == nil {
				lease, err := l.AcquireRead(stop, name)
				if err != nil {
					if stop.Err() == nil {
						fail.report(t, "AcquireRead: %v", err)
					}
					return
				}
				rg.enter()
				if n := wg.n.Load(); n > 0 {
					fail.report(t, "a reader held the lock together with a writer")
				}
				time.Sleep(hold)
				rg.leave()
				_ = lease.Release(ctx)
			}
		})
	}
	time.Sleep(5 * hold) // the stream of readers is flowing
	bound := s.lossBound()
	wctx, cancel := context.WithTimeout(ctx, bound)
	start := time.Now()
	w, err := lockers[2].AcquireWrite(wctx, name)
	cancel()
	if err != nil {
		stopReaders()
		all.Wait()
		t.Fatalf("a writer waited %v among a stream of readers and did not get the lock (%v): writer starvation", time.Since(start), err)
	}
	t.Logf("the writer got the lock %v after asking, among %d readers", time.Since(start), readers)
	wg.enter()
	if n := rg.n.Load(); n > 0 {
		t.Errorf("the writer got the lock while %d readers held it", n)
	}
	time.Sleep(hold)
	wg.leave()
	release(t, ctx, w)
	time.Sleep(2 * hold) // readers carry on after the writer
	stopReaders()
	all.Wait()
	if rg.max.Load() < 2 {
		t.Errorf("the readers never overlapped (gauge peaked at %d); the property needs a continuous stream", rg.max.Load())
	}
}

// rwTokens: tokens strictly increase from grant to grant, in either mode,
// and readers holding together have distinct ones.
func (s *suite) rwTokens(t *testing.T, ctx context.Context, name string) {
	lockers := s.lockers(t, 3)
	if s.noRW(t, ctx, lockers[0], name) {
		return
	}
	var seq []uint64
	for round := range 4 {
		w := mustAcquire(t, func() (*dlock.Lease, error) {
			if round%2 == 0 {
				return lockers[round%3].AcquireWrite(ctx, name)
			}
			return lockers[round%3].TryAcquireWrite(ctx, name)
		}, "acquire write")
		seq = append(seq, w.Token())
		release(t, ctx, w)
		var held []*dlock.Lease
		for i, l := range lockers {
			r := mustAcquire(t, func() (*dlock.Lease, error) {
				if (round+i)%2 == 0 {
					return l.AcquireRead(ctx, name)
				}
				return l.TryAcquireRead(ctx, name)
			}, "acquire read alongside other readers")
			seq = append(seq, r.Token())
			held = append(held, r)
		}
		for _, r := range held {
			release(t, ctx, r)
		}
	}
	checkIncreasing(t, seq, "across successive readers-writer grants")

	// Readers arriving together.
	var (
		tokens tokenSet
		all    sync.WaitGroup
		fail   firstError
		start  = make(chan struct{})
	)
	leases := make(chan *dlock.Lease, 8)
	for i := range 8 {
		all.Go(func() {
			<-start
			r, err := lockers[i%3].AcquireRead(ctx, name)
			if err != nil {
				fail.report(t, "AcquireRead: %v", err)
				return
			}
			tokens.add(r.Token())
			leases <- r
		})
	}
	close(start)
	all.Wait()
	close(leases)
	for r := range leases {
		if r.Token() <= seq[len(seq)-1] {
			t.Errorf("a reader's token %d is not greater than an earlier grant's %d", r.Token(), seq[len(seq)-1])
		}
		release(t, ctx, r)
	}
	tokens.check(t, "concurrent readers'")
}

// mustAcquire calls acquire, which must return a lease.
func mustAcquire(t *testing.T, acquire func() (*dlock.Lease, error), what string) *dlock.Lease {
	t.Helper()
	lease, err := acquire()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if lease == nil {
		t.Fatalf("%s returned a nil lease and a nil error", what)
	}
	return lease
}

// mustTimeOut calls acquire with a context that ends after d: what, a
// wait that cannot succeed, must fail with DeadlineExceeded.
func mustTimeOut[T releasable](t *testing.T, ctx context.Context, d time.Duration, acquire func(context.Context) (T, error), what string) {
	t.Helper()
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	mustFailWith(t, ctx, context.DeadlineExceeded, func() (T, error) { return acquire(wctx) }, what)
}

// mustFail calls try, which must fail with an error matching
// ErrNotAcquired.
func mustFail(t *testing.T, ctx context.Context, try func() (*dlock.Lease, error), what string) {
	t.Helper()
	mustFailWith(t, ctx, dlock.ErrNotAcquired, try, what)
}

// releasable is a lease or a set of them.
type releasable interface {
	comparable
	Release(context.Context) error
}

// mustFailWith calls try, which must fail with an error matching want,
// and return no lease (one it returns nonetheless is released).
func mustFailWith[T releasable](t *testing.T, ctx context.Context, want error, try func() (T, error), what string) {
	t.Helper()
	lease, err := try()
	var none T
	if lease != none {
		_ = lease.Release(ctx)
		if err != nil {
			t.Errorf("%s returned a lease with its error", what)
		}
	}
	if err == nil {
		t.Errorf("%s succeeded, want an error matching %q", what, want)
	} else if !errors.Is(err, want) {
		t.Errorf("%s = %v, want an error matching %q", what, err, want)
	}
}
