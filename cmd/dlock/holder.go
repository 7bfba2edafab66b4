package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/dlockgo/dlock/internal/privdir"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
)

// The detached holder: on a backend whose locks live as long as the
// session, connection or file descriptor that took them, dlock acquire
// starts "dlock __hold", which keeps the lock and serves later steps on a
// Unix socket (see docs/CLI.md for its socket and when it exits).
const holdCommand = "__hold"

// Replies of the holder, one line each.
const (
	holdOK   = "ok"
	holdGone = "gone" // followed by why
)

// runtimeDir returns the per-user directory of the holders' sockets:
// $XDG_RUNTIME_DIR/dlock, else <temp>/dlock-<uid>, created 0700. It must
// be the user's own and writable by nobody else: whoever could write there
// could stand in for a holder.
func runtimeDir() (string, error) {
	dir := filepath.Join(os.TempDir(), "dlock-"+strconv.Itoa(os.Getuid()))
	if x := os.Getenv("XDG_RUNTIME_DIR"); filepath.IsAbs(x) {
		dir = filepath.Join(x, "dlock")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	if err := privdir.Check(dir, 0o077); err != nil {
		return "", err
	}
	return dir, nil
}

// startHolder starts the detached holder of o's lock on backend and waits
// for its word: the handle (printed, exit 0), busy (75), or a failure. A
// signal to dlock acquire while the holder waits makes it give up.
func startHolder(sio *stdio, f *flags, backend string, o runOpts) int {
	dir, err := runtimeDir()
	if err != nil {
		return failf(sio, exitUnavailable, f.cmd, "no directory for the lock's holder, so no later step could reach it: %v", err)
	}
	sock := filepath.Join(dir, "hold-"+newID()+newID()+".sock")
	self, err := os.Executable()
	if err != nil {
		return failf(sio, exitUnavailable, f.cmd, "cannot start the lock's holder: %v", err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return failf(sio, exitUnavailable, f.cmd, "cannot start the lock's holder: %v", err)
	}
	args := []string{holdCommand, "--ttl", o.ttl.String(), "--max-hold", o.maxHold.String(), "--log-level", f.logLevel}
	if o.noWait {
		args = append(args, "--no-wait")
	} else if o.wait > 0 {
		args = append(args, "--wait", o.wait.String())
	}
	args = append(args, o.name, sock)
	cmd := exec.Command(self, args...)
	// The backend's URL goes by the environment: every local user can read argv.
	cmd.Env = append(os.Environ(), envBackend+"="+backend)
	cmd.ExtraFiles = []*os.File{w}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		_ = r.Close()
		_ = w.Close()
		return failf(sio, exitUnavailable, f.cmd, "cannot start the lock's holder: %v", err)
	}
	_ = w.Close()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)
	word := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(r).ReadString('\n')
		word <- strings.TrimSpace(line)
	}()
	var line string
	select {
	case line = <-word:
	case s := <-sigs:
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		return 128 + int(s.(syscall.Signal))
	}
	_ = r.Close()
	kind, rest, _ := strings.Cut(line, " ")
	switch kind {
	case holdOK:
		_ = cmd.Process.Release() // it lives on, in a session of its own
		fmt.Fprintln(sio.out, rest)
		return exitOK
	case "exit":
		_ = cmd.Wait()
		code, msg, _ := strings.Cut(rest, " ")
		n, err := strconv.Atoi(code)
		if err != nil {
			n = exitUnavailable
		}
		return failf(sio, n, f.cmd, "%s", msg)
	}
	_ = cmd.Wait()
	return failf(sio, exitUnavailable, f.cmd, "the lock's holder ended without a word")
}

// cmdHold is the detached holder (see holdCommand): dlock __hold [flags]
// NAME SOCKET, with the backend in $DLOCK_BACKEND and its word to dlock
// acquire written on file descriptor 3.
func cmdHold(ctx context.Context, sio *stdio, args []string) int {
	f := newFlags(holdCommand, "", "")
	var o runOpts
	o.lockFlags(f, "", "") // as dlock acquire's, which passes them on
	word := os.NewFile(3, "word")
	say := func(format string, a ...any) {
		if word != nil {
			fmt.Fprintf(word, format+"\n", a...)
			_ = word.Close()
			word = nil
		}
	}
	exit := func(code int, format string, a ...any) int {
		say("exit %d %s", code, fmt.Sprintf(format, a...))
		return code
	}
	pos, _, ok := f.parse(&stdio{out: sio.out, err: sio.err}, args)
	if !ok || len(pos) != 2 {
		return exit(exitUsage, "internal: bad holder arguments")
	}
	o.name, o.busyCode = pos[0], exitBusy
	o.acquireOpts = []dlock.Option{dlock.WithMaxHold(o.maxHold)}
	sock := pos[1]
	log, err := f.logger(sio.err)
	if err != nil {
		return exit(exitUsage, "%v", err)
	}
	// The word goes to dlock acquire: collect the one line a failure
	// prints, and pass it on.
	var msg strings.Builder
	fsio := &stdio{out: sio.out, err: &msg}
	// The holder's --ttl bounds how long it waits for a renew; the
	// lock's own TTL (a session's timeout, a lease's) bounds how long a
	// holder that crashed keeps it, at most DefaultTTL.
	locker, code := openLocker(ctx, fsio, "dlock acquire", f.backend(), dlock.WithLogger(log),
		dlock.WithTTL(min(o.ttl, dlock.DefaultTTL)))
	if locker == nil {
		return exit(code, "%s", trimCmd(msg.String()))
	}
	defer locker.Close()
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	lease, code, ok := acquireForRun(ctx, fsio, "dlock acquire", locker, o, sigs)
	if !ok {
		return exit(code, "%s", trimCmd(msg.String()))
	}
	ln, err := net.Listen("unix", sock)
	if err != nil {
		_ = lease.Release(context.Background())
		return exit(exitUnavailable, "the lock's holder cannot listen on %s: %v", sock, err)
	}
	defer func() { _ = ln.Close(); _ = os.Remove(sock) }()
	// The library hands a handle out only by Detach, which would end the
	// lease: this process keeps it, so the CLI writes the handle itself.
	h := dlock.Handle{Name: lease.Name(), Mode: lease.Mode(), Owner: lease.Owner(), Token: lease.Token(), TTL: lease.TTL()}
	if s, ok := locker.Driver().(driver.Schemer); ok {
		h.Scheme = s.Scheme()
	}
	if o.maxHold > 0 {
		h.Deadline = time.Now().Add(o.maxHold) // at most a moment after the lease's own
	}
	say("%s %s", holdOK, cliHandle{Handle: h, holder: sock})
	hold(ctx, ln, lease, o.ttl, sigs)
	return exitOK
}

// trimCmd drops the "dlock acquire: " a failf line starts with, which
// dlock acquire prints again.
func trimCmd(s string) string {
	return strings.TrimPrefix(strings.TrimSpace(s), "dlock acquire: ")
}

// hold serves the holder's socket until the lease must end: a release, the
// TTL without a renew, the lease's end (lost, --max-hold), a signal.
// Then it releases the lease, if still held.
func hold(ctx context.Context, ln net.Listener, lease *dlock.Lease, ttl time.Duration, sigs <-chan os.Signal) {
	type request struct {
		line    string
		reply   chan<- string
		written <-chan struct{} // closed once the reply is written
	}
	reqs := make(chan request)
	serve := func(c net.Conn) { // one request on c
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil {
			return
		}
		reply, written := make(chan string, 1), make(chan struct{})
		select {
		case reqs <- request{strings.TrimSpace(line), reply, written}:
			fmt.Fprintln(c, <-reply)
			close(written)
		case <-lease.Done():
			fmt.Fprintf(c, "%s %v\n", holdGone, lease.Err())
		}
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go serve(c)
		}
	}()
	idle := time.NewTimer(ttl)
	defer idle.Stop()
	defer func() {
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = lease.Release(rctx)
	}()
	for {
		select {
		case r := <-reqs:
			verb, rest, _ := strings.Cut(r.line, " ")
			owner, arg, _ := strings.Cut(rest, " ")
			switch {
			case owner != lease.Owner():
				r.reply <- holdGone + " this holder holds another acquisition"
			case lease.Err() != nil:
				r.reply <- fmt.Sprintf("%s %v", holdGone, lease.Err())
				return
			case verb == "renew":
				ms, err := strconv.ParseInt(arg, 10, 64)
				if err != nil || ms <= 0 {
					r.reply <- "bad renew " + arg
					continue
				}
				idle.Reset(time.Duration(ms) * time.Millisecond)
				r.reply <- holdOK
			case verb == "release":
				rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				err := lease.Release(rctx)
				cancel()
				if err != nil && !errors.Is(err, dlock.ErrNotHeld) {
					r.reply <- fmt.Sprintf("error %v", err)
				} else if err != nil {
					r.reply <- fmt.Sprintf("%s %v", holdGone, err)
				} else {
					r.reply <- holdOK
				}
				// The reply goes out before the holder exits.
				select {
				case <-r.written:
				case <-time.After(5 * time.Second):
				}
				return
			default:
				r.reply <- "bad request " + verb
			}
		case <-idle.C:
			return // no renew within the TTL
		case <-lease.Done():
			return
		case <-sigs:
			return
		}
	}
}

// askHolder sends one request for h to its holder and returns the reply:
// nil for ok, an error matching dlock.ErrNotHeld when the holder is gone
// or no longer holds the lock.
func askHolder(h cliHandle, verb, arg string) error {
	dir, err := runtimeDir()
	if err != nil {
		return err
	}
	if filepath.Dir(h.holder) != dir {
		return fmt.Errorf("%w: its holder %s is not in this user's runtime directory %s", dlock.ErrBadHandle, h.holder, dir)
	}
	c, err := net.DialTimeout("unix", h.holder, 5*time.Second)
	if err != nil {
		return fmt.Errorf("%w: its holder is gone (it released the lock at its TTL, --max-hold or a loss)", dlock.ErrNotHeld)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(15 * time.Second))
	line := verb + " " + h.Owner
	if arg != "" {
		line += " " + arg
	}
	if _, err := fmt.Fprintln(c, line); err != nil {
		return err
	}
	reply, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return fmt.Errorf("%w: its holder ended before it answered", dlock.ErrNotHeld)
	}
	kind, rest, _ := strings.Cut(strings.TrimSpace(reply), " ")
	switch kind {
	case holdOK:
		return nil
	case holdGone:
		return fmt.Errorf("%w: %s", dlock.ErrNotHeld, rest)
	}
	return errors.New(strings.TrimSpace(reply))
}
