package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/dlockgo/dlock"
)

const runHelp = `Usage: dlock run [flags] NAME -- COMMAND [ARGS...]

Takes the lock NAME, runs COMMAND while holding it, and releases it.

By default dlock waits for the lock as long as it takes; --wait bounds the
wait and --no-wait makes one attempt. When the lock cannot be had, dlock
prints one line and exits with the busy code (75, --busy-exit-code).

The command gets DLOCK_NAME and DLOCK_TOKEN (the lock's fencing token) in
its environment, runs in a process group of its own, and its exit code is
dlock's (128+N when signal N killed it). SIGINT, SIGTERM, SIGHUP and SIGQUIT
sent to dlock are passed on to the command; the lock is released when it
exits.

If the lock is lost while the command runs (its renewal failed, or the
store lost it), the command's process group gets SIGTERM, then SIGKILL
after --grace, and dlock exits with the lost code (76, --lost-exit-code).
--max-hold caps the hold: once the lock was held that long, renewal stops,
the lock is released, and the command is ended the same way, so that a
command that hangs cannot keep the lock for ever.

Exit codes: the command's own; 64 usage error or bad backend URL; 69 backend
unreachable or failing; 75 busy; 76 lock lost; 126 command not executable;
127 command not found.
`

const runExamples = `  dlock run --no-wait nightly-report -- ./report.sh
  dlock run --wait 30s --ttl 10s --backend redis://127.0.0.1:6379 backup -- pg_dump -f db.sql app
  dlock run --busy-exit-code 0 --no-wait rotate -- logrotate app.conf   # busy is not a failure
  dlock run --max-hold 2h --backend etcd://10.0.0.1:2379/ci deploy-prod -- ./deploy.sh   # never held past 2h
  */5 * * * * dlock run --no-wait --backend redis://lock-host:6379 sync -- /opt/sync   # crontab on every host
`

// runOpts are dlock run's settings.
type runOpts struct {
	name        string
	command     []string
	wait        time.Duration
	noWait      bool
	ttl         time.Duration
	maxHold     time.Duration
	busyCode    int
	lostCode    int
	grace       time.Duration
	metricsAddr string
	// acquireOpts are the acquisition's options, for verbs other than run.
	acquireOpts []dlock.Option
}

// lockFlags adds the flags of taking the lock, which dlock run, dlock
// acquire and the holder share: --wait, --no-wait, --ttl and --max-hold,
// the last two with the command's help.
func (o *runOpts) lockFlags(f *flags, ttlHelp, maxHoldHelp string) {
	f.DurationVar(&o.wait, "wait", 0, "give up after waiting this `duration` for the lock (default: wait as long as it takes)")
	f.BoolVar(&o.noWait, "no-wait", false, "make one attempt; exit with the busy code if the lock is held")
	f.DurationVar(&o.ttl, "ttl", dlock.DefaultTTL, ttlHelp)
	f.DurationVar(&o.maxHold, "max-hold", 0, maxHoldHelp)
}

// forwarded are the signals dlock passes on to the command.
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT}

func cmdRun(ctx context.Context, sio *stdio, args []string) int {
	f := newFlags("run", runHelp, runExamples)
	var o runOpts
	o.lockFlags(f, "the lock's time to live on the store; renewed every TTL/3 while the command runs",
		"end the command, as for a lost lock, once the lock was held this `duration` (default: no cap)")
	f.IntVar(&o.busyCode, "busy-exit-code", exitBusy, "exit `code` when the lock is held by another owner")
	f.IntVar(&o.lostCode, "lost-exit-code", exitLost, "exit `code` when the lock is lost while the command runs")
	f.DurationVar(&o.grace, "grace", 10*time.Second, "after a lost lock, how long the command has between SIGTERM and SIGKILL")
	f.StringVar(&o.metricsAddr, "metrics-addr", "", "serve Prometheus metrics on `host:port` (path /metrics) while dlock runs")

	// Everything after the first "--" is the command, never parsed as flags.
	var command []string
	if i := slices.Index(args, "--"); i >= 0 {
		args, command = args[:i], args[i+1:]
	}
	var pos []string
	if command != nil {
		var code int
		var ok bool
		if pos, code, ok = f.parse(sio, args); !ok {
			return code
		}
	} else {
		// Without "--": flags, NAME, then the command, whose own flags
		// (ls -l) must not be taken for dlock's.
		if code, ok := f.parseOnce(sio, args); !ok {
			return code
		}
		if rest := f.Args(); len(rest) > 0 {
			pos, command = rest[:1], rest[1:]
		}
	}
	switch {
	case len(pos) == 0:
		return usageErr(sio, f.cmd, "missing lock NAME")
	case len(pos) > 1:
		return usageErr(sio, f.cmd, "one lock NAME expected before --, got %q", pos)
	case len(command) == 0:
		return usageErr(sio, f.cmd, "missing COMMAND after %s --", pos[0])
	case holdFlagsErr(o) != "":
		return usageErr(sio, f.cmd, "%s", holdFlagsErr(o))
	case o.grace < 0:
		return usageErr(sio, f.cmd, "--grace %v: must not be negative", o.grace)
	case !validExitCode(o.busyCode):
		return usageErr(sio, f.cmd, "--busy-exit-code %d: want 0 to 255", o.busyCode)
	case !validExitCode(o.lostCode):
		return usageErr(sio, f.cmd, "--lost-exit-code %d: want 0 to 255", o.lostCode)
	}
	if err := dlock.ValidateName(pos[0]); err != nil {
		return usageErr(sio, f.cmd, "%v", err)
	}
	o.name, o.command = pos[0], command
	log, err := f.logger(sio.err)
	if err != nil {
		return usageErr(sio, f.cmd, "%v", err)
	}
	return runLocked(ctx, sio, f, log, o)
}

func validExitCode(c int) bool { return c >= 0 && c <= 255 }

// holdFlagsErr checks the flags dlock run and dlock acquire share: how to
// wait, the TTL, the cap on holding. It returns what is wrong, or "".
func holdFlagsErr(o runOpts) string {
	switch {
	case o.noWait && o.wait != 0:
		return "--wait and --no-wait exclude each other"
	case o.wait < 0:
		return fmt.Sprintf("--wait %v: must not be negative", o.wait)
	case o.ttl < dlock.MinTTL:
		return fmt.Sprintf("--ttl %v: below the minimum %v", o.ttl, dlock.MinTTL)
	case o.maxHold < 0:
		return fmt.Sprintf("--max-hold %v: must not be negative", o.maxHold)
	}
	return ""
}

// openWithLog opens the flags' backend with the flags' logger; on failure
// it returns a nil Locker and the exit code.
func openWithLog(ctx context.Context, sio *stdio, f *flags) (*dlock.Locker, *slog.Logger, int) {
	log, err := f.logger(sio.err)
	if err != nil {
		return nil, nil, usageErr(sio, f.cmd, "%v", err)
	}
	locker, code := openLocker(ctx, sio, f.cmd, f.backend(), dlock.WithLogger(log))
	return locker, log, code
}

// runLocked acquires the lock, runs the command and releases the lock.
func runLocked(ctx context.Context, sio *stdio, f *flags, log *slog.Logger, o runOpts) int {
	// Signals are caught from the start: a Ctrl-C while waiting for the
	// lock must leave nothing held or queued.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)

	opts := []dlock.Option{dlock.WithLogger(log), dlock.WithTTL(o.ttl), dlock.WithMaxHold(o.maxHold)}
	if o.metricsAddr != "" {
		srv, err := serveMetrics(o.metricsAddr, log)
		if err != nil {
			return failf(sio, exitUsage, f.cmd, "--metrics-addr %s: %v", o.metricsAddr, err)
		}
		defer srv.Close()
		opts = append(opts, dlock.WithMeterProvider(srv.Provider))
	}
	backend := f.backend()
	locker, code := openLocker(ctx, sio, f.cmd, backend, opts...)
	if locker == nil {
		return code
	}
	defer locker.Close()
	log = log.With("backend", redact(backend), "name", o.name)

	// From here a signal ends the wait cleanly (see acquireForRun).
	log.Debug("dlock: acquiring", "wait", !o.noWait)
	lease, code, ok := acquireForRun(ctx, sio, f.cmd, locker, o, sigs)
	if !ok {
		return code
	}
	log = log.With("token", lease.Token())
	log.Info("dlock: acquired; starting the command", "command", o.command[0])

	cmd := exec.Command(o.command[0], o.command[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), "DLOCK_NAME="+o.name, "DLOCK_TOKEN="+strconv.FormatUint(lease.Token(), 10))
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		releaseAfterRun(sio, f.cmd, log, lease)
		code := exitCannotExec
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			code = exitNotFound
		}
		return failf(sio, code, f.cmd, "%v", err)
	}
	return superviseChild(sio, f.cmd, log, cmd, lease, o, sigs)
}

// notRunning ends a busy message: the command not run, if there is one.
func notRunning(o runOpts) string {
	if len(o.command) == 0 {
		return ""
	}
	return "; not running " + o.command[0]
}

// acquireForRun takes the lock as o asks. A signal during the wait
// abandons it; ok is false then, and on any failure, with the exit code.
func acquireForRun(ctx context.Context, sio *stdio, cmd string, locker *dlock.Locker, o runOpts, sigs <-chan os.Signal) (*dlock.Lease, int, bool) {
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	if o.wait > 0 {
		actx, cancel = context.WithTimeout(actx, o.wait)
		defer cancel()
	}
	type result struct {
		lease *dlock.Lease
		err   error
	}
	done := make(chan result, 1)
	go func() {
		var r result
		if o.noWait {
			r.lease, r.err = locker.TryAcquire(actx, o.name, o.acquireOpts...)
		} else {
			r.lease, r.err = locker.Acquire(actx, o.name, o.acquireOpts...)
		}
		done <- r
	}()
	var caught os.Signal
	var r result
	for waiting := true; waiting; {
		select {
		case r = <-done:
			waiting = false
		case s := <-sigs:
			caught = cmp.Or(caught, s)
			cancel()
		}
	}
	if caught != nil {
		if r.lease != nil {
			releaseAfterRun(sio, cmd, nil, r.lease)
		}
		return nil, 128 + int(caught.(syscall.Signal)), false
	}
	switch {
	case r.err == nil:
		return r.lease, 0, true
	case errors.Is(r.err, dlock.ErrNotAcquired):
		return nil, failf(sio, o.busyCode, cmd, "lock %q is held by another owner%s", o.name, notRunning(o)), false
	case errors.Is(r.err, context.DeadlineExceeded) && ctx.Err() == nil:
		return nil, failf(sio, o.busyCode, cmd, "lock %q is still held after waiting %v%s", o.name, o.wait, notRunning(o)), false
	}
	return nil, failf(sio, exitUnavailable, cmd, "%s", oneLine(r.err)), false
}

// superviseChild waits for the command, passing signals on and stopping
// it if the lock is lost, then releases the lock and returns the exit
// code.
func superviseChild(sio *stdio, cmdName string, log *slog.Logger, cmd *exec.Cmd, lease *dlock.Lease, o runOpts, sigs <-chan os.Signal) int {
	pgid := cmd.Process.Pid
	exited := make(chan struct{})
	var waitErr error
	go func() {
		waitErr = cmd.Wait()
		close(exited)
	}()
	var (
		lost  bool
		kill  <-chan time.Time
		ended = lease.Done()
	)
	for running := true; running; {
		select {
		case <-exited:
			running = false
		case s := <-sigs:
			log.Info("dlock: passing a signal on to the command", "signal", s.String())
			_ = syscall.Kill(-pgid, s.(syscall.Signal))
		case <-ended:
			ended = nil
			if !errors.Is(lease.Err(), dlock.ErrLost) {
				continue
			}
			lost = true
			log.Error("dlock: lock lost; terminating the command", "error", lease.Err(), "grace", o.grace)
			why := oneLine(lease.Err())
			if errors.Is(lease.Err(), dlock.ErrMaxHold) {
				why = fmt.Sprintf("--max-hold %v ran out", o.maxHold)
			}
			fmt.Fprintf(sio.err, "%s: lock %q lost while the command ran: %s; sending SIGTERM, SIGKILL in %v\n", cmdName, o.name, why, o.grace)
			_ = syscall.Kill(-pgid, syscall.SIGTERM)
			t := time.NewTimer(o.grace)
			defer t.Stop()
			kill = t.C
		case <-kill:
			kill = nil
			log.Error("dlock: the command outlived the grace period; killing it")
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
		}
	}
	if lost {
		// Whatever is left of the job must not go on without the lock.
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		return o.lostCode
	}
	code := exitCode(cmd.ProcessState, waitErr)
	if releaseAfterRun(sio, cmdName, log, lease) {
		return o.lostCode
	}
	return code
}

// releaseAfterRun releases the lease. It reports whether the lock turned
// out to have been lost meanwhile: the command may then have overlapped
// another holder, which the caller reports with the lost code.
func releaseAfterRun(sio *stdio, cmd string, log *slog.Logger, lease *dlock.Lease) (lost bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := lease.Release(ctx)
	switch {
	case err == nil:
		if log != nil {
			log.Debug("dlock: released")
		}
		return false
	case errors.Is(err, dlock.ErrLost):
		fmt.Fprintf(sio.err, "%s: lock %q was lost before the command ended: %s\n", cmd, lease.Name(), oneLine(err))
		return true
	default:
		fmt.Fprintf(sio.err, "%s: release %q: %s\n", cmd, lease.Name(), oneLine(err))
		return false
	}
}

// exitCode returns the command's exit status, or 128+N if signal N killed it.
func exitCode(ps *os.ProcessState, waitErr error) int {
	if ps == nil {
		if waitErr != nil {
			return exitFailure
		}
		return exitOK
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}
