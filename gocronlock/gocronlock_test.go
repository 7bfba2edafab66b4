package gocronlock_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-co-op/gocron/v2"

	"github.com/dlockgo/dlock"
	_ "github.com/dlockgo/dlock/filelock"
	"github.com/dlockgo/dlock/gocronlock"
	"github.com/dlockgo/dlock/internal/testenv"
	_ "github.com/dlockgo/dlock/redislock"
)

// backends are the real backends the tests run on: lock files in a
// directory of the test's own, and the shared Redis.
func backends(t *testing.T) map[string]func(t *testing.T) string {
	return map[string]func(t *testing.T) string{
		"file":  func(t *testing.T) string { return "file://" + t.TempDir() },
		"redis": func(t *testing.T) string { return "redis://" + testenv.RedisAddr(t) },
	}
}

// openN opens n Lockers on url, as n instances of a service would; they
// are closed when the test ends.
func openN(t *testing.T, url string, n int) []*dlock.Locker {
	t.Helper()
	ls := make([]*dlock.Locker, n)
	for i := range ls {
		l, err := dlock.Open(context.Background(), url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		ls[i] = l
	}
	return ls
}

// runs records the executions of a job: when each started, and how many
// ran at once at most.
type runs struct {
	mu       sync.Mutex
	starts   []time.Time
	inFlight atomic.Int32
	maxIn    atomic.Int32
}

func (r *runs) job(d time.Duration) func() {
	return func() {
		n := r.inFlight.Add(1)
		defer r.inFlight.Add(-1)
		for {
			m := r.maxIn.Load()
			if n <= m || r.maxIn.CompareAndSwap(m, n) {
				break
			}
		}
		r.mu.Lock()
		r.starts = append(r.starts, time.Now())
		r.mu.Unlock()
		time.Sleep(d)
	}
}

// perTick counts the executions in each interval since t0.
func (r *runs) perTick(t0 time.Time, interval time.Duration) map[int]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := map[int]int{}
	for _, s := range r.starts {
		m[int(s.Sub(t0)/interval)]++
	}
	return m
}

// schedule starts three gocron schedulers, 100ms apart (the spread of
// timers across instances), each running the same job every interval
// through a Locker of its own, and stops them after ticks intervals.
func schedule(t *testing.T, lockers []*dlock.Locker, interval time.Duration, ticks int, r *runs, opts ...gocronlock.Option) (time.Time, []*gocronlock.Locker) {
	t.Helper()
	const spread = 100 * time.Millisecond
	var scheds []gocron.Scheduler
	var gls []*gocronlock.Locker
	name := "report-" + rand.Text()
	t0 := time.Now()
	for i, l := range lockers {
		gl := gocronlock.New(l, opts...)
		gls = append(gls, gl)
		s, err := gocron.NewScheduler(gocron.WithDistributedLocker(gl))
		if err != nil {
			t.Fatal(err)
		}
		_, err = s.NewJob(gocron.DurationJob(interval), gocron.NewTask(r.job(20*time.Millisecond)),
			gocron.WithName(name),
			gocron.WithStartAt(gocron.WithStartDateTime(t0.Add(interval/2+time.Duration(i)*spread))))
		if err != nil {
			t.Fatal(err)
		}
		s.Start()
		scheds = append(scheds, s)
	}
	time.Sleep(interval/2 + time.Duration(ticks)*interval)
	for _, s := range scheds {
		if err := s.Shutdown(); err != nil {
			t.Error(err)
		}
	}
	for _, gl := range gls {
		gl.Wait()
	}
	return t0.Add(interval / 2), gls
}

// TestThreeSchedulersRunEachTickOnce: three schedulers on one backend run
// a short job every interval; each tick runs exactly once (a tick may
// only be missed at the very end, cut by the shutdown), never two at once.
// MinHold promises this while the schedulers' timers fire within it of
// each other: at 1.5 s (interval/2) that spread is a scheduler's delay no
// loaded machine reaches, where 300 ms was.
func TestThreeSchedulersRunEachTickOnce(t *testing.T) {
	const interval, ticks = 3 * time.Second, 4
	for label, url := range backends(t) {
		t.Run(label, func(t *testing.T) {
			var r runs
			start, _ := schedule(t, openN(t, url(t), 3), interval, ticks, &r, gocronlock.WithMinHold(interval/2))
			counts := r.perTick(start, interval)
			for tick := range ticks - 1 {
				if counts[tick] != 1 {
					t.Errorf("tick %d ran %d times, want once (all: %v)", tick, counts[tick], counts)
				}
			}
			if counts[ticks] > 1 || counts[ticks-1] > 1 {
				t.Errorf("a late tick ran more than once: %v", counts)
			}
			if m := r.maxIn.Load(); m != 1 {
				t.Errorf("%d runs of the job overlapped, want none", m)
			}
		})
	}
}

// TestWithoutMinHoldShortJobsRunAgain is the control for the test above:
// with the lock released as soon as the job ends, the schedulers whose
// timers fire later run the same tick again. It shows that the test above
// can fail, and why MinHold exists.
func TestWithoutMinHoldShortJobsRunAgain(t *testing.T) {
	const interval, ticks = 600 * time.Millisecond, 3
	var r runs
	start, _ := schedule(t, openN(t, "file://"+t.TempDir(), 3), interval, ticks, &r, gocronlock.WithMinHold(0))
	counts := r.perTick(start, interval)
	again := 0
	for _, n := range counts {
		if n > 1 {
			again++
		}
	}
	if again == 0 {
		t.Fatalf("without MinHold no tick ran twice (%v): the schedulers' spread did not show", counts)
	}
}

func TestLockNames(t *testing.T) {
	l := openN(t, "file://"+t.TempDir(), 1)[0]
	gl := gocronlock.New(l)
	if got := gl.LockName("report"); got != "gocron/report" {
		t.Errorf("LockName(report) = %q", got)
	}
	odd := gl.LockName("main.(*T).run-fm")
	if dlock.ValidateName(odd) != nil || odd == gl.LockName("main.(*T).run") {
		t.Errorf("LockName of a Go function name = %q: want a valid, distinct digest name", odd)
	}
	lock, err := gl.Lock(context.Background(), "main.(*T).run-fm")
	if err != nil {
		t.Fatalf("Lock with a Go function name: %v", err)
	}
	if _, err := gl.Lock(context.Background(), "main.(*T).run-fm"); err == nil {
		t.Fatal("a second Lock of a held job succeeded")
	}
	if err := lock.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	gl.Wait()
	if _, err := gl.Lock(context.Background(), "main.(*T).run-fm"); err != nil {
		t.Fatalf("Lock after Unlock and Wait: %v", err)
	}
}

// TestElector: three electors, one leader at a time; when the leader
// closes, another takes over.
func TestElector(t *testing.T) {
	for label, url := range backends(t) {
		t.Run(label, func(t *testing.T) {
			ls := openN(t, url(t), 3)
			name := "gocron-leader-" + rand.Text()
			var es []*gocronlock.Elector
			for i, l := range ls {
				e, err := gocronlock.NewElector(l, name, fmt.Sprintf("instance-%d", i))
				if err != nil {
					t.Fatal(err)
				}
				es = append(es, e)
				t.Cleanup(func() { _ = e.Close() })
			}
			leader := waitOneLeader(t, es, -1)
			if err := es[leader].Close(); err != nil {
				t.Fatal(err)
			}
			next := waitOneLeader(t, es, leader)
			if next == leader {
				t.Fatal("the closed elector still leads")
			}
		})
	}
}

// waitOneLeader waits until exactly one elector (other than skip) leads,
// checking that never more than one does, and returns it.
func waitOneLeader(t *testing.T, es []*gocronlock.Elector, skip int) int {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		leader, n := -1, 0
		for i, e := range es {
			if i != skip && e.IsLeader(context.Background()) == nil {
				leader, n = i, n+1
			}
		}
		if n > 1 {
			t.Fatalf("%d electors lead at once", n)
		}
		if n == 1 {
			return leader
		}
		if time.Now().After(deadline) {
			t.Fatal("no elector became leader")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
