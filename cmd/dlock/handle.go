package main

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
)

const acquireHelp = `Usage: dlock acquire [flags] NAME

Takes the lock NAME and prints its handle on stdout: one line, nothing
else. The lock stays held after dlock exits, until "dlock release HANDLE",
until its TTL runs out without a "dlock renew HANDLE", or until
--max-hold, whichever comes first. Pass the handle to the later steps (an
environment variable, a file): it holds the acquisition's owner value,
which is what lets them renew and release the lock, and no credentials of
the backend, which each step names with --backend.

Waiting works as for dlock run: by default as long as it takes, --wait
bounds it, --no-wait makes one attempt.

On redis (every topology), redlock and nats the lock lives on the store
by itself, so the steps may run on different hosts. On the other backends
a lock lives as long as the session, connection or file that took it, so
dlock acquire leaves a holder process behind, in a session of its own,
that keeps it and listens on a socket in the per-user runtime directory
($XDG_RUNTIME_DIR/dlock, else /tmp/dlock-UID), named in the handle: the
later steps must run on the same host as the same user. The holder exits,
releasing the lock and removing its socket, at the release, at the TTL
without a renew, at --max-hold, or when the lock is lost.

Exit codes: 0 acquired (the handle printed); 64 usage error or bad backend
URL; 69 backend unreachable or failing, or no runtime directory; 75 busy.
`

const acquireExamples = `  H=$(dlock acquire --ttl 10m --max-hold 2h --backend redis://lock-host:6379 deploy-prod)
  dlock renew --ttl 10m "$H"     # a later step, before the TTL runs out
  dlock release "$H"              # the last step
`

const renewHelp = `Usage: dlock renew [flags] HANDLE

Renews the lock HANDLE stands for (printed by dlock acquire) to --ttl from
now, if that acquisition still holds it. The lock stays held after dlock
exits, as after dlock acquire. The handle's --max-hold still bounds it.

Exit codes: 0 renewed; 64 usage error, bad backend URL or handle; 69
backend unreachable or failing; 76 the handle no longer holds the lock (it
expired, another owner has it, or --max-hold ran out): nothing changed.
`

const renewExamples = `  dlock renew --ttl 10m "$H"
`

const releaseHelp = `Usage: dlock release [flags] HANDLE

Releases the lock HANDLE stands for (printed by dlock acquire), if that
acquisition still holds it; a lock another owner holds is never touched.

Exit codes: 0 released; 64 usage error, bad backend URL or handle; 69
backend unreachable or failing; 76 the handle no longer holds the lock
(it expired, or another owner has it): nothing changed.
`

const releaseExamples = `  dlock release "$H"
`

func cmdAcquire(ctx context.Context, sio *stdio, args []string) int {
	f := newFlags("acquire", acquireHelp, acquireExamples)
	var o runOpts
	o.lockFlags(f, "the lock's time to live on the store: how long it stays without a dlock renew",
		"the longest the lock may be held, renewals included (default: no cap)")
	pos, code, ok := f.parse(sio, args)
	if !ok {
		return code
	}
	switch {
	case len(pos) != 1:
		return usageErr(sio, f.cmd, "one lock NAME expected, got %q", pos)
	case holdFlagsErr(o) != "":
		return usageErr(sio, f.cmd, "%s", holdFlagsErr(o))
	}
	if err := dlock.ValidateName(pos[0]); err != nil {
		return usageErr(sio, f.cmd, "%v", err)
	}
	o.name, o.busyCode = pos[0], exitBusy
	o.acquireOpts = []dlock.Option{dlock.WithTTL(o.ttl), dlock.WithMaxHold(o.maxHold)}
	locker, log, code := openWithLog(ctx, sio, f)
	if locker == nil {
		return code
	}
	defer locker.Close()
	if _, ok := locker.Driver().(driver.Resumer); !ok {
		// The lock must live in a process: the detached holder's.
		_ = locker.Close()
		return startHolder(sio, f, f.backend(), o)
	}
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)
	lease, code, ok := acquireForRun(ctx, sio, f.cmd, locker, o, sigs)
	if !ok {
		return code
	}
	h, err := lease.Detach()
	if err != nil {
		releaseAfterRun(sio, f.cmd, log, lease)
		return failf(sio, exitUnavailable, f.cmd, "%s", oneLine(err))
	}
	fmt.Fprintln(sio.out, cliHandle{Handle: h}.String())
	return exitOK
}

// cliHandle is a handle as the CLI prints and reads it: the library's
// dlock.Handle and the socket of the lock's detached holder (see
// holdCommand), empty for a lock that lives on the store by itself.
type cliHandle struct {
	dlock.Handle
	holder string
}

// String encodes h as Handle.String does, then a dot and the holder in
// base64url (empty without a holder) as a tenth field.
func (h cliHandle) String() string {
	return h.Handle.String() + "." + base64.RawURLEncoding.EncodeToString([]byte(h.holder))
}

// parseHandle decodes a handle the CLI printed (String) or the library's
// (dlock.Handle.String: the nine fields without the holder's tenth).
func parseHandle(s string) (cliHandle, error) {
	s = strings.TrimSpace(s)
	var h cliHandle
	if strings.Count(s, ".") == 9 {
		i := strings.LastIndexByte(s, '.')
		holder, err := base64.RawURLEncoding.DecodeString(s[i+1:])
		if err != nil {
			return h, fmt.Errorf("%w: the holder is not base64url", dlock.ErrBadHandle)
		}
		s, h.holder = s[:i], string(holder)
	}
	var err error
	h.Handle, err = dlock.ParseHandle(s)
	return h, err
}

func cmdRenew(ctx context.Context, sio *stdio, args []string) int {
	f := newFlags("renew", renewHelp, renewExamples)
	ttl := f.Duration("ttl", dlock.DefaultTTL, "the lock's new time to live, from now")
	pos, code, ok := f.parse(sio, args)
	if !ok {
		return code
	}
	if *ttl < dlock.MinTTL {
		return usageErr(sio, f.cmd, "--ttl %v: below the minimum %v", *ttl, dlock.MinTTL)
	}
	return withHandle(ctx, sio, f, pos, func(locker *dlock.Locker, h cliHandle) error {
		if h.holder != "" {
			if !h.Deadline.IsZero() && time.Now().After(h.Deadline) {
				return fmt.Errorf("%w: its --max-hold deadline has passed", dlock.ErrMaxHold)
			}
			return askHolder(h, "renew", strconv.FormatInt(ttl.Milliseconds(), 10))
		}
		lease, err := locker.Resume(ctx, h.Handle, dlock.WithTTL(*ttl), dlock.WithAutoRenew(false))
		if err != nil {
			return err
		}
		_, err = lease.Detach()
		return err
	})
}

func cmdRelease(ctx context.Context, sio *stdio, args []string) int {
	f := newFlags("release", releaseHelp, releaseExamples)
	pos, code, ok := f.parse(sio, args)
	if !ok {
		return code
	}
	return withHandle(ctx, sio, f, pos, func(locker *dlock.Locker, h cliHandle) error {
		if h.holder != "" {
			return askHolder(h, "release", "")
		}
		return locker.ReleaseHandle(ctx, h.Handle)
	})
}

// withHandle parses the one HANDLE argument, opens the backend and runs
// do, turning its error into the exit code: 76 when the handle no longer
// holds the lock.
func withHandle(ctx context.Context, sio *stdio, f *flags, pos []string, do func(*dlock.Locker, cliHandle) error) int {
	if len(pos) != 1 {
		return usageErr(sio, f.cmd, "one HANDLE expected (printed by dlock acquire), got %d arguments", len(pos))
	}
	h, err := parseHandle(pos[0])
	if err != nil {
		return usageErr(sio, f.cmd, "%v", err)
	}
	if u, err := url.Parse(f.backend()); err == nil && f.backendNamed() && backendOf(u.Scheme) != h.Scheme {
		return failf(sio, exitUsage, f.cmd, "%v: a handle of the %s backend, not %s", dlock.ErrBadHandle, h.Scheme, backendOf(u.Scheme))
	}
	var locker *dlock.Locker
	if h.holder == "" { // a holder's lock is reached through the holder
		var code int
		if locker, _, code = openWithLog(ctx, sio, f); locker == nil {
			return code
		}
		defer locker.Close()
	} else if _, err := f.logger(sio.err); err != nil {
		return usageErr(sio, f.cmd, "%v", err)
	}
	err = do(locker, h)
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, dlock.ErrBadHandle):
		return failf(sio, exitUsage, f.cmd, "%s", oneLine(err))
	case errors.Is(err, dlock.ErrNotHeld), errors.Is(err, dlock.ErrMaxHold):
		return failf(sio, exitLost, f.cmd, "lock %q is no longer held by this handle: %s", h.Name, oneLine(err))
	}
	return failf(sio, exitUnavailable, f.cmd, "%s", oneLine(err))
}

// backendOf is the backend a URL scheme opens, as a handle names it.
func backendOf(scheme string) string {
	switch {
	case scheme == "etcds":
		return "etcd"
	case scheme == "postgresql":
		return "postgres"
	case strings.HasPrefix(scheme, "redis"):
		return "redis"
	}
	return scheme
}
