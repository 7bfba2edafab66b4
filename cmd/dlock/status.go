package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
)

const statusHelp = `Usage: dlock status [flags] [NAME|PREFIX]

Shows the locks held on the backend whose names start with the argument
(all of them without one): the fencing token of the holder, the holder as
far as the backend can tell, the remaining TTL ("-" for a lock held as
long as its holder's process or session lives) and the number of waiters
("?" when the backend cannot tell). --json prints a JSON array instead.

Backends answer through the optional driver.Inspector interface; one
without it answers "not supported" (exit 69).
`

const statusExamples = `  dlock status
  dlock status orders/            # every lock under orders/
  dlock status --json nightly-report
`

// statusEntry is one line of dlock status --json.
type statusEntry struct {
	Name    string     `json:"name"`
	Mode    string     `json:"mode"`
	Token   uint64     `json:"token"`
	Owner   string     `json:"owner,omitempty"`
	Expires *time.Time `json:"expires,omitempty"`
	TTLMs   *int64     `json:"ttl_remaining_ms,omitempty"`
	Waiters *int       `json:"waiters,omitempty"`
}

func cmdStatus(ctx context.Context, sio *stdio, args []string) int {
	f := newFlags("status", statusHelp, statusExamples)
	asJSON := f.Bool("json", false, "print JSON instead of a table")
	pos, code, ok := f.parse(sio, args)
	if !ok {
		return code
	}
	if len(pos) > 1 {
		return usageErr(sio, f.cmd, "at most one NAME or PREFIX, got %q", pos)
	}
	prefix := ""
	if len(pos) == 1 {
		prefix = pos[0]
	}
	locker, _, code := openWithLog(ctx, sio, f)
	if locker == nil {
		return code
	}
	defer locker.Close()
	insp, ok := locker.Driver().(driver.Inspector)
	if !ok {
		scheme := "custom"
		if u, err := url.Parse(f.backend()); err == nil {
			scheme = u.Scheme
		}
		return failf(sio, exitUnavailable, f.cmd, "not supported by the %s backend (%v)", scheme, dlock.ErrUnsupported)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	locks, err := insp.Inspect(ctx, prefix)
	if err != nil {
		return failf(sio, exitUnavailable, f.cmd, "%s", oneLine(err))
	}
	now := time.Now()
	if *asJSON {
		out := make([]statusEntry, 0, len(locks))
		for _, l := range locks {
			e := statusEntry{Name: l.Name, Mode: l.Mode.String(), Token: l.Token, Owner: l.Owner}
			if !l.Expires.IsZero() {
				e.Expires, e.TTLMs = new(l.Expires), new(max(l.Expires.Sub(now), 0).Milliseconds())
			}
			if l.Waiters >= 0 {
				e.Waiters = new(l.Waiters)
			}
			out = append(out, e)
		}
		enc := json.NewEncoder(sio.out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out); err != nil {
			return failf(sio, exitFailure, f.cmd, "%v", err)
		}
		return exitOK
	}
	if len(locks) == 0 {
		if prefix == "" {
			fmt.Fprintln(sio.out, "no locks held")
		} else {
			fmt.Fprintf(sio.out, "no locks held under %q\n", prefix)
		}
		return exitOK
	}
	tw := tabwriter.NewWriter(sio.out, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tMODE\tTOKEN\tOWNER\tTTL\tWAITERS")
	for _, l := range locks {
		ttl, waiters, owner := "-", "?", l.Owner
		if !l.Expires.IsZero() {
			ttl = max(l.Expires.Sub(now), 0).Round(time.Millisecond).String()
		}
		if l.Waiters >= 0 {
			waiters = strconv.Itoa(l.Waiters)
		}
		if owner == "" {
			owner = "?"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", l.Name, l.Mode, l.Token, owner, ttl, waiters)
	}
	if err := tw.Flush(); err != nil {
		return failf(sio, exitFailure, f.cmd, "%v", err)
	}
	return exitOK
}
