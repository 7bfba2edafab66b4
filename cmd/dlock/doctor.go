package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/internal/doctor"
)

const doctorHelp = `Usage: dlock doctor [flags] [URL]

Checks a store's settings against what dlock's guarantees assume, and
prints one line per check: ok, warn or fail, what it found, why it matters
for a lock, the setting to change and the docs section. Every backend
checks the round trip (against --ttl) and the store's clock against this
host's where the store tells time; each adds its own (a Redis that may
evict lock keys, a PostgreSQL standby, an etcd without a leader, a NATS
bucket on one server of a cluster...: docs/CLI.md lists them).
The URL is the argument, else --backend, else $DLOCK_BACKEND. It only
reads: it takes no lock and changes no setting (on PostgreSQL it opens
with migrate=false, on NATS with create=false: a missing bucket is an
error, exit 69).

Exit status: 0 when no check fails (warnings do not), 1 when one fails,
69 when the store cannot be reached (or its backend has no checks), 64
for a bad URL.
`

const doctorExamples = `  dlock doctor redis://127.0.0.1:6379
  dlock doctor --json postgres://127.0.0.1/app
  dlock doctor --ttl 5s "redis+sentinel://10.0.0.1:26379?master_name=mymaster"
`

// doctorEntry is one element of dlock doctor --json.
type doctorEntry struct {
	Check    string `json:"check"`
	Severity string `json:"severity"`
	Found    string `json:"found"`
	Why      string `json:"why,omitempty"`
	Fix      string `json:"fix,omitempty"`
	Doc      string `json:"doc,omitempty"`
}

// readOnlyParams are the URL parameters doctor sets to false, by scheme,
// so that opening the store writes nothing: pglock creates its token
// table, and natslock its bucket, at open unless told not to.
var readOnlyParams = map[string]string{"postgres": "migrate", "postgresql": "migrate", "nats": "create"}

func cmdDoctor(ctx context.Context, sio *stdio, args []string) int {
	f := newFlags("doctor", doctorHelp, doctorExamples)
	asJSON := f.Bool("json", false, "print JSON instead of lines")
	ttl := f.Duration("ttl", dlock.DefaultTTL, "the locks' time to live, which the round trip is judged against")
	pos, code, ok := f.parse(sio, args)
	if !ok {
		return code
	}
	if len(pos) > 1 {
		return usageErr(sio, f.cmd, "at most one URL, got %q", pos)
	}
	if *ttl <= 0 {
		return usageErr(sio, f.cmd, "--ttl must be positive, got %v", *ttl)
	}
	if len(pos) == 1 {
		f.backends = multiFlag{pos[0]}
	}
	if u, err := url.Parse(f.backend()); err == nil {
		if p := readOnlyParams[u.Scheme]; p != "" && !u.Query().Has(p) {
			// Appended, not re-encoded: the driver reads the rest as written.
			u.RawQuery = strings.TrimPrefix(u.RawQuery+"&"+p+"=false", "&")
			f.backends = multiFlag{u.String()}
		}
	}
	locker, _, code := openWithLog(ctx, sio, f)
	if locker == nil {
		return code
	}
	defer locker.Close()
	dg, ok := locker.Driver().(driver.Diagnoser)
	if !ok {
		return failf(sio, exitUnavailable, f.cmd, "no checks for this backend (%v)", dlock.ErrUnsupported)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	findings, err := dg.Diagnose(ctx, *ttl)
	if err != nil {
		return failf(sio, exitUnavailable, f.cmd, "%s", oneLine(err))
	}
	failed := false
	for _, fd := range findings {
		failed = failed || fd.Severity == driver.Fail
	}
	if *asJSON {
		out := make([]doctorEntry, 0, len(findings))
		for _, fd := range findings {
			out = append(out, doctorEntry{Check: fd.Check, Severity: fd.Severity.String(), Found: fd.Found, Why: fd.Why, Fix: fd.Fix, Doc: fd.Doc})
		}
		enc := json.NewEncoder(sio.out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out); err != nil {
			return failf(sio, exitFailure, f.cmd, "%v", err)
		}
	} else {
		counts := map[driver.Severity]int{}
		for _, fd := range findings {
			counts[fd.Severity]++
			fmt.Fprintln(sio.out, doctor.Line(fd))
		}
		fmt.Fprintf(sio.out, "%d ok, %d warn, %d fail\n", counts[driver.OK], counts[driver.Warn], counts[driver.Fail])
	}
	if failed {
		return exitFailure
	}
	return exitOK
}
