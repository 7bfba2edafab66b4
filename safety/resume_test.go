package safety

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/filelock"
	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/mysqllock"
)

// resumeCase is one backend of TestResumedHolder.
type resumeCase struct {
	url      string        // the holder's URL
	otherURL string        // the other client's URL (default url)
	ttl      time.Duration // lock TTL (zk: the session timeout is in url)
	// pause is how long the holder stays stopped before anything else
	// happens: past the lock's validity where the store expires locks.
	// pauses, if set, replaces it: run i pauses for pauses[i%len(pauses)].
	pause  time.Duration
	pauses []time.Duration
	// free, when set, takes the lock called name away from the stopped
	// holder on the store (kills its connection, removes its file): the
	// store does not expire it on its own.
	free  func(ctx context.Context, other *dlock.Locker, name string) error
	fault string // what happens to the holder, for the log
}

// pauseOf is the pause of run i.
func (c resumeCase) pauseOf(i int) time.Duration {
	if len(c.pauses) > 0 {
		return c.pauses[i%len(c.pauses)]
	}
	return c.pause
}

// resumeResult is what one run of TestResumedHolder measured. Times are
// UnixNano of the host's clock, shared by the test and the holder.
type resumeResult struct {
	last        int64     // the holder's last look that found the lease held
	otherStart  int64     // when the other client's successful TryAcquire started
	otherEnd    int64     // when it returned
	cont        int64     // just before SIGCONT was sent
	errAt       int64     // when the holder's first look that found it ended returned
	doneAt      int64     // when the holder saw Done close (0: not within 5s)
	afterResume int64     // looks after the pause that still found the lease held
	gap         int64     // the holder's longest time between two looks
	stoppedAt   int64     // when the test saw the holder stopped
	stopped     int64     // how long the holder was stopped, as the test saw it
	lost        bool      // whether that first error matched dlock.ErrLost
	err         string    // its text
	tokens      [2]uint64 // the holder's token and the other client's
}

// unsafe reports why the run broke the promise ("" if it did not): the
// holder looked and found its lease held after the other client had
// started the acquisition that got the lock, its first error after the
// resume was not ErrLost, or the other client's token was not above the
// holder's.
func (r resumeResult) unsafe() string {
	var why []string
	if r.last >= r.otherStart {
		why = append(why, fmt.Sprintf("last held look %v after the other's acquisition started", time.Duration(r.last-r.otherStart)))
	}
	if r.afterResume > 0 {
		why = append(why, fmt.Sprintf("%d looks after the resume found the lease held", r.afterResume))
	}
	if !r.lost {
		why = append(why, fmt.Sprintf("the first error does not match ErrLost: %s", r.err))
	}
	if r.tokens[1] <= r.tokens[0] {
		why = append(why, fmt.Sprintf("the other client's token %d is not above the holder's %d", r.tokens[1], r.tokens[0]))
	}
	return strings.Join(why, "; ")
}

// TestResumedHolder is the promise that a lost lock is known at the
// holder's first look (issue 13, item 5): a holder process acquires a
// lock and looks at lease.Err() in a tight loop; it is frozen (SIGSTOP)
// while its lock's validity ends and the store frees the lock (on its own
// where locks expire; by killing the holder's connection on postgres and
// mysql, by removing the lock file on file), another client acquires it,
// and the holder is resumed (SIGCONT). The first Err() after the resume
// must be non-nil and match dlock.ErrLost: the holder's last look that
// found the lease held must come before the other client's acquisition
// started (the start, not the return, so that the bound is the earliest
// the other can have held the lock from). The lease may only learn of the
// loss when its own goroutines run after the resume; a look that comes
// first must find out from the clock (or the socket) by itself.
//
// Each backend runs scale(20, 100) times with lease.Err() as the look and
// scale(5, 20) times with the Err of the lease's Context, one holder
// process per run. A run that cannot be made (the other client never gets
// the lock, the stop misses the holder's loop) fails the test: it is never
// counted as safe. The figures go to the log and, with -safety.table or at
// full size, to the SAFETY table.
func TestResumedHolder(t *testing.T) {
	bin := buildHolder(t)
	const ttl = 400 * time.Millisecond
	// A lock that lives with its connection (postgres, mysql) has no
	// validity to outlast. Runs alternate between a pause shorter than the
	// holder's keep-alive period (TTL/3), which may find the keep-alive
	// timer due at the resume or not, and one of 2×TTL, after which it is
	// overdue: either way the keep-alive check races the first look, in
	// different ways.
	connPauses := []time.Duration{100 * time.Millisecond, 2 * ttl}
	// A gs:// URL names its server in the environment, which the cases,
	// run at once, share: the one GCS server starts here.
	gcs := testenv.StartGCS(t)
	cases := map[string]func(t *testing.T) resumeCase{
		"redis": func(t *testing.T) resumeCase {
			return resumeCase{url: "redis://" + testenv.RedisAddr(t), ttl: ttl, pause: 2 * ttl,
				fault: "paused 2×TTL, key expired"}
		},
		"redlock": func(t *testing.T) resumeCase {
			nodes := testenv.StartRedisN(t, 5, testenv.RedisOptions{})
			return resumeCase{url: "redlock://" + testenv.Addrs(nodes), ttl: ttl, pause: 2 * ttl,
				fault: "paused 2×TTL, keys expired on 5 masters"}
		},
		"zookeeper": func(t *testing.T) resumeCase {
			// The session timeout bounds the validity: the server expires
			// the stopped holder's session, and its ephemeral node, after
			// it (rounded up to its tick); the other client's retries wait
			// for that.
			const session = time.Second
			return resumeCase{url: "zk://" + testenv.ZKAddr(t) + "/dlock-resume?session_timeout=" + session.String(),
				ttl: session, pause: 3 * session / 2, fault: "paused 1.5× session timeout (1s), session expired"}
		},
		"etcd": func(t *testing.T) resumeCase {
			// etcd counts leases in whole seconds and stretches short ones
			// to its minimum: the other client's retries wait for the
			// server's actual expiry.
			const lease = time.Second
			return resumeCase{url: "etcd://" + strings.Join(testenv.EtcdEndpoints(t), ","),
				ttl: lease, pause: 3 * lease / 2, fault: "paused 1.5× lease TTL (1s), lease expired"}
		},
		"postgres": func(t *testing.T) resumeCase {
			app := fmt.Sprintf("dlock-resume-%d", time.Now().UnixNano())
			base := testenv.PGURL(t)
			admin := testenv.PGConn(t)
			return resumeCase{
				url: withParam(base, "application_name="+app), otherURL: withParam(base, "application_name="+app+"-other"),
				ttl: ttl, pauses: connPauses, fault: "paused 100ms or 2×TTL, pg_terminate_backend of its backend",
				free: func(ctx context.Context, _ *dlock.Locker, _ string) error {
					// Only the holder's connection that holds an advisory
					// lock: the lock's, not the pool's others.
					var n int
					err := admin.QueryRow(ctx, `SELECT count(pg_terminate_backend(l.pid))
						FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
						WHERE l.locktype = 'advisory' AND l.granted AND a.application_name = $1`, app).Scan(&n)
					if err == nil && n != 1 {
						err = fmt.Errorf("%d backends of %s hold an advisory lock, want 1", n, app)
					}
					return err
				},
			}
		},
		"mysql": func(t *testing.T) resumeCase {
			db := testenv.MySQLDB(t)
			u := testenv.MySQLURL(t)
			return resumeCase{
				url: u, ttl: ttl, pauses: connPauses, fault: "paused 100ms or 2×TTL, KILL of its connection (or its wait_timeout)",
				free: func(ctx context.Context, other *dlock.Locker, name string) error {
					// The server-side name, which mysqllock may escape or
					// hash: the driver says which.
					d, ok := other.Driver().(*mysqllock.Driver)
					if !ok {
						return fmt.Errorf("the mysql Locker's driver is a %T", other.Driver())
					}
					var id sql.NullInt64
					if err := db.QueryRowContext(ctx, "SELECT IS_USED_LOCK(?)", d.LockName(name)).Scan(&id); err != nil {
						return err
					}
					if !id.Valid {
						// The server ended the stopped holder's session
						// itself: its wait_timeout is the lock's TTL
						// rounded up to whole seconds, which a 2×TTL
						// pause can outlast. The lock is free, as the
						// KILL would have made it.
						return nil
					}
					_, err := db.ExecContext(ctx, fmt.Sprintf("KILL %d", id.Int64))
					return err
				},
			}
		},
		"nats": func(t *testing.T) resumeCase {
			// NATS counts key TTLs in whole seconds: the server expires the
			// stopped holder's key a second after its last renewal.
			const keyTTL = time.Second
			c := testenv.StartNATS(t, 1)
			return resumeCase{url: "nats://" + c.URL() + "/dlock-resume", ttl: keyTTL, pause: 2 * keyTTL,
				fault: "paused 2×TTL (1s), key expired"}
		},
		"s3": func(t *testing.T) resumeCase {
			// The store judges expiry on its clock, in whole seconds: the
			// other client gets the lock at most a second after the TTL
			// (2 s, the shortest s3lock takes) since the last renewal.
			srv := testenv.StartS3(t)
			return resumeCase{url: srv.URL("dlock-resume"), ttl: 2 * time.Second, pause: 4 * time.Second,
				fault: "paused 2×TTL (2s), record expired on the store's clock"}
		},
		"azblob": func(t *testing.T) resumeCase {
			// As s3: expiry on the store's clock, in whole seconds.
			srv := testenv.StartAzure(t)
			return resumeCase{url: srv.URL("dlock-resume"), ttl: 2 * time.Second, pause: 4 * time.Second,
				fault: "paused 2×TTL (2s), record expired on the store's clock"}
		},
		"gs": func(t *testing.T) resumeCase {
			// As s3, on the server STORAGE_EMULATOR_HOST names (below).
			return resumeCase{url: gcs.URL("dlock-resume"), ttl: 2 * time.Second, pause: 4 * time.Second,
				fault: "paused 2×TTL (2s), record expired on the store's clock"}
		},
		"file": func(t *testing.T) resumeCase {
			// A flock has no TTL, and a stopped holder keeps it: the one
			// way it loses the lock is the lock file's removal (another
			// process then locks a new file under the same name). The
			// lease's validity, renewed every TTL/3, has ended too.
			dir := t.TempDir()
			return resumeCase{
				url: "file://" + dir, ttl: ttl, pause: 2 * ttl, fault: "paused 2×TTL, lock file removed",
				free: func(_ context.Context, _ *dlock.Locker, name string) error {
					f, err := filelock.FileName(name)
					if err != nil {
						return err
					}
					return os.Remove(filepath.Join(dir, f))
				},
			}
		},
	}
	// The backends run at once, each in a goroutine of its own: a run
	// spends nearly all its time waiting for a lock to expire, and
	// t.Parallel would let only GOMAXPROCS of them wait together.
	var wg sync.WaitGroup
	testenv.SetS3Env(t)
	testenv.SetAzureEnv(t)
	gcs.SetEnv(t)
	for _, name := range []string{"zookeeper", "etcd", "redis", "redlock", "nats", "s3", "azblob", "gs", "postgres", "mysql", "file"} {
		setup := cases[name]
		wg.Go(func() {
			t.Run(name, func(t *testing.T) { resumeBackend(t, bin, name, setup(t)) })
		})
	}
	wg.Wait()
}

// resumeLook is a way a holder looks at its lease, and how many runs do.
type resumeLook struct {
	look string // the holder's -look
	runs int
}

// resumeLooks are the two ways: lease.Err(), asserted over scale(20, 100)
// runs per backend, and the Err of the lease's Context (then
// context.Cause), which must answer the same way, over fewer runs to keep
// the test's time in CI near a minute. A function, not a variable: the
// size is known only once the flags are parsed.
func resumeLooks() []resumeLook {
	return []resumeLook{{"err", scale(20, 100)}, {"ctx", scale(5, 20)}}
}

// resumeBackend runs one backend's runs and asserts and reports them.
func resumeBackend(t *testing.T, bin, backend string, c resumeCase) {
	if c.otherURL == "" {
		c.otherURL = c.url
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	other, err := dlock.Open(ctx, c.otherURL, dlock.WithTTL(c.ttl))
	cancel()
	if err != nil {
		t.Fatalf("open the other client: %v", err)
	}
	t.Cleanup(func() { _ = other.Close() })

	for _, l := range resumeLooks() {
		var rs []resumeResult
		var unsafe []string
		for i := range l.runs {
			name := fmt.Sprintf("resume-%s-%d-%d", backend, time.Now().UnixNano(), i)
			r, err := resumeRun(bin, l.look, c, c.pauseOf(i), other, name)
			if err != nil {
				t.Fatalf("%s looks, run %d of %d: %v", l.look, i+1, l.runs, err)
			}
			rs = append(rs, r)
			if why := r.unsafe(); why != "" {
				unsafe = append(unsafe, fmt.Sprintf("run %d: %s (first error %v after the resume: %s)",
					i+1, why, time.Duration(r.errAt-r.cont).Round(time.Microsecond), r.err))
			}
			if r.doneAt == 0 {
				t.Errorf("%s looks, run %d: the lease said lost (%s) but Done did not close within 5s", l.look, i+1, r.err)
			}
		}
		row := resumeSummary(backend, c.fault, l.look, rs, len(unsafe))
		t.Log(row.String())
		resumeTable.add(row)
		for k, u := range unsafe {
			if k == 5 {
				t.Errorf("... and %d more", len(unsafe)-k)
				break
			}
			t.Errorf("%s looks, %s", l.look, u)
		}
		if len(unsafe) > 0 {
			t.Errorf("%s, %s looks: %d of %d runs unsafe: the resumed holder's first look found the lease held after another client had the lock",
				backend, l.look, len(unsafe), len(rs))
		}
	}
}

// resumeRow is one line of the resumed-holder table: a backend and a way
// of looking, over its runs.
type resumeRow struct {
	backend, fault, look string
	runs, unsafe         int
	// Distributions over the runs.
	lastMinusOther dist // holder's last held look − other's acquisition start
	contToErr      dist // SIGCONT → first look that found the lease ended
	contToDone     dist // SIGCONT → Done closed
	stopToOther    dist // holder stopped → other's successful acquisition started
	heldAfter      dist // looks after the resume that found the lease held (a count)
	firstErr       string
}

// dist is the min, median and max of a sample.
type dist struct{ min, p50, max int64 }

func distOf(rs []resumeResult, f func(resumeResult) int64) dist {
	v := make([]int64, len(rs))
	for i, r := range rs {
		v[i] = f(r)
	}
	slices.Sort(v)
	return dist{v[0], v[len(v)/2], v[len(v)-1]}
}

// dur formats d as durations, rounded to microseconds.
func (d dist) dur() string {
	f := func(x int64) time.Duration { return time.Duration(x).Round(time.Microsecond) }
	return fmt.Sprintf("%v / %v / %v", f(d.min), f(d.p50), f(d.max))
}

func (d dist) count() string { return fmt.Sprintf("%d / %d / %d", d.min, d.p50, d.max) }

func resumeSummary(backend, fault, look string, rs []resumeResult, unsafe int) resumeRow {
	return resumeRow{
		backend: backend, fault: fault, look: look, runs: len(rs), unsafe: unsafe,
		lastMinusOther: distOf(rs, func(r resumeResult) int64 { return r.last - r.otherStart }),
		contToErr:      distOf(rs, func(r resumeResult) int64 { return r.errAt - r.cont }),
		contToDone: distOf(rs, func(r resumeResult) int64 {
			if r.doneAt == 0 {
				return int64(time.Hour) // not within 5s (an error): shows as the maximum
			}
			return r.doneAt - r.cont
		}),
		stopToOther: distOf(rs, func(r resumeResult) int64 { return r.otherStart - r.stoppedAt }),
		heldAfter:   distOf(rs, func(r resumeResult) int64 { return r.afterResume }),
		firstErr:    rs[0].err,
	}
}

// String is the row for the test log.
func (r resumeRow) String() string {
	return fmt.Sprintf("%s / %s / %s looks: %d runs, %d unsafe (min / p50 / max below)\n"+
		"  holder's last held look − other's acquisition start: %s\n"+
		"  SIGCONT → first look that found the lease ended: %s\n"+
		"  SIGCONT → Done closed: %s\n"+
		"  looks after the resume that found the lease held: %s\n"+
		"  holder stopped → other's successful TryAcquire started: %s\n"+
		"  first run's error: %s",
		r.backend, r.fault, r.look, r.runs, r.unsafe,
		r.lastMinusOther.dur(), r.contToErr.dur(), r.contToDone.dur(), r.heldAfter.count(), r.stopToOther.dur(), r.firstErr)
}

var resumeTable rows[resumeRow]

// writeResumeTable adds TestResumedHolder's table to the SAFETY table's
// text, when the test ran.
func writeResumeTable(b *strings.Builder) {
	rs := resumeTable.all()
	if len(rs) == 0 {
		return
	}
	b.WriteString("\nResumed holder (TestResumedHolder): min / p50 / max over the runs; unsafe: the holder's first look after the resume found the lease held after the other client's acquisition started.\n\n")
	b.WriteString("| backend | fault | look | runs | unsafe | last held look − other's acquisition start | SIGCONT → first look that said lost | SIGCONT → Done closed | stopped → other acquired |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rs {
		fmt.Fprintf(b, "| %s | %s | %s | %d | %d | %s | %s | %s | %s |\n",
			r.backend, r.fault, r.look, r.runs, r.unsafe, r.lastMinusOther.dur(), r.contToErr.dur(), r.contToDone.dur(), r.stopToOther.dur())
	}
}

// resumeRun is one run: start a holder, stop it while it looks, free the
// lock (or let it expire), acquire it with other, resume the holder and
// read what it saw. An error is a run that could not be made (the holder
// failed, the other client never got the lock, the pause missed the
// holder's looking): it fails the test rather than count as safe.
func resumeRun(bin, look string, c resumeCase, pause time.Duration, other *dlock.Locker, name string) (resumeResult, error) {
	var r resumeResult
	cmd := exec.Command(bin, "-url", c.url, "-name", name, "-ttl", c.ttl.String(), "-look", look)
	stderr := new(testenv.Buffer)
	cmd.Stderr = stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return r, err
	}
	if err := cmd.Start(); err != nil {
		return r, err
	}
	// The holder writes two lines at most: the buffer never blocks the
	// reader, which must finish reading before Wait.
	events := make(chan holderEvent, 8)
	exited := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var e holderEvent
			if json.Unmarshal(sc.Bytes(), &e) == nil {
				events <- e
			}
		}
		close(events)
		exited <- cmd.Wait()
	}()
	reaped := false
	// A holder left stopped would never end: continue it before killing
	// it, and reap it, whatever happened.
	defer func() {
		if reaped {
			return
		}
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		<-exited
	}()
	next := func(want string, timeout time.Duration) (holderEvent, error) {
		select {
		case e, ok := <-events:
			switch {
			case !ok:
				err := <-exited
				reaped = true
				return e, fmt.Errorf("the holder ended before reporting %q: %v: %s", want, err, stderr)
			case e.Kind == "fail":
				return e, fmt.Errorf("the holder failed: %s", e.Msg)
			case e.Kind != want:
				return e, fmt.Errorf("the holder reported %q, want %q", e.Kind, want)
			}
			return e, nil
		case <-time.After(timeout):
			return holderEvent{}, fmt.Errorf("the holder did not report %q within %v", want, timeout)
		}
	}

	held, err := next("holding", 30*time.Second)
	if err != nil {
		return r, err
	}
	r.tokens[0] = held.Token
	// Let it loop a while first, and land the pause at a different point
	// of the renewal cycle each run.
	time.Sleep(10*time.Millisecond + rand.N(c.ttl/3))
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return r, err
	}
	if err := waitStopped(cmd.Process.Pid, 2*time.Second); err != nil {
		return r, err
	}
	stoppedAt := time.Now()
	r.stoppedAt = stoppedAt.UnixNano()
	time.Sleep(pause)
	if c.free != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := c.free(ctx, other, name)
		cancel()
		if err != nil {
			return r, fmt.Errorf("take the lock from the stopped holder: %w", err)
		}
	}

	// TryAcquire in a loop rather than one waiting Acquire: the start of
	// the successful attempt is then a close bound for the instant from
	// which the other client held the lock (never later than it).
	lease, err := otherAcquire(other, name, 30*time.Second)
	if err != nil {
		return r, err
	}
	r.otherStart, r.otherEnd = lease.start.UnixNano(), lease.end.UnixNano()
	r.tokens[1] = lease.Token()

	select {
	case e := <-events:
		return r, fmt.Errorf("the holder reported %q before it was resumed: its lease ended before the pause? (%s)", e.Kind, e.Err)
	default:
	}
	r.cont = time.Now().UnixNano()
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		return r, err
	}
	r.stopped = r.cont - stoppedAt.UnixNano()
	res, err := next("result", 70*time.Second)
	if err != nil {
		return r, err
	}
	r.last, r.errAt, r.doneAt, r.err, r.lost = res.Last, res.ErrAt, res.DoneAt, res.Err, res.Lost
	r.afterResume, r.gap = res.AfterGap, res.Gap

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	err = lease.Release(ctx)
	cancel()
	if err != nil {
		return r, fmt.Errorf("the other client's release: %w", err)
	}
	select {
	case err := <-exited:
		reaped = true
		if err != nil {
			return r, fmt.Errorf("the holder: %v: %s", err, stderr)
		}
	case <-time.After(20 * time.Second):
		return r, errors.New("the holder did not exit after reporting")
	}
	// The holder's longest gap between looks must be the stop: otherwise
	// the pause did not freeze it while it looked, and the run shows
	// nothing.
	if r.gap < r.stopped/2 {
		return r, fmt.Errorf("the holder's longest gap between looks is %v, but it was stopped for %v: the pause missed its loop (its last held look %v and first error %v after the stop: %s)",
			time.Duration(r.gap), time.Duration(r.stopped), time.Duration(r.last-stoppedAt.UnixNano()), time.Duration(r.errAt-stoppedAt.UnixNano()), r.err)
	}
	return r, nil
}

// otherLease is the other client's lease, with when the TryAcquire that
// got it started and returned.
type otherLease struct {
	*dlock.Lease
	start, end time.Time
}

// otherAcquire tries to acquire name every few milliseconds until it gets
// it or limit passes.
func otherAcquire(other *dlock.Locker, name string, limit time.Duration) (otherLease, error) {
	deadline := time.Now().Add(limit)
	var last error
	for tries := 1; ; tries++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		start := time.Now()
		lease, err := other.TryAcquire(ctx, name)
		end := time.Now()
		cancel()
		if err == nil {
			return otherLease{Lease: lease, start: start, end: end}, nil
		}
		last = err
		if time.Now().After(deadline) {
			return otherLease{}, fmt.Errorf("the other client did not get the lock in %d tries within %v: %w", tries, limit, last)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitStopped waits until the process pid is stopped (state T in
// /proc/pid/stat): SIGSTOP is only delivered, not yet acted on, when kill
// returns, and the pause must not be counted from before the stop.
func waitStopped(pid int, limit time.Duration) error {
	path := "/proc/" + strconv.Itoa(pid) + "/stat"
	deadline := time.Now().Add(limit)
	for {
		b, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("read the holder's state: %w", err)
		}
		// The state follows the command name, which is in parentheses
		// and may itself contain them.
		if i := strings.LastIndexByte(string(b), ')'); i >= 0 && i+2 < len(b) && b[i+2] == 'T' {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the holder did not stop within %v after SIGSTOP", limit)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// buildHolder builds safety/internal/holder into t's temporary directory,
// once per run of TestResumedHolder.
func buildHolder(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "holder")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/dlockgo/dlock/safety/internal/holder").CombinedOutput()
	if err != nil {
		t.Fatalf("go build the holder: %v\n%s", err, out)
	}
	return bin
}

// holderEvent is one line of the holder's output (safety/internal/holder).
type holderEvent struct {
	Kind     string `json:"k"`
	Token    uint64 `json:"t"`
	At       int64  `json:"at"`
	Last     int64  `json:"last"`
	ErrAt    int64  `json:"err_at"`
	Err      string `json:"err"`
	Lost     bool   `json:"lost"`
	DoneAt   int64  `json:"done_at"`
	Looks    int64  `json:"looks"`
	Gap      int64  `json:"gap"`
	AfterGap int64  `json:"after_gap"`
	Msg      string `json:"msg"`
}
