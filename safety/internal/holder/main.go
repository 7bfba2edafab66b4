// Command holder is the safety suite's watchful lock holder, for the
// resumed-holder test (TestResumedHolder): it acquires one lock on a dlock
// backend URL and then does nothing but look at its lease, as fast as it
// can, until the lease says it is lost. A look is lease.Err(), or with
// -look ctx the Err of the lease's Context (and then context.Cause). The test freezes it (SIGSTOP)
// while it looks, lets another client take the lock, and resumes it
// (SIGCONT): what the holder saw after resuming is the result.
//
// It writes one JSON line per event on stdout:
//
//	{"k":"holding","t":42,"at":1700000000000000000}   acquired, token 42
//	{"k":"result","last":...,"err_at":...,"err":"...","lost":true,
//	 "done_at":...,"looks":...,"gap":...,"after_gap":0}
//	{"k":"fail","msg":"..."}                          it could not run
//
// In "result": last is the time of the last look that found the lease held
// (Err nil), err_at the time the first look that found it ended returned,
// err that look's error and lost whether it matched dlock.ErrLost; done_at
// is when Done closed (0 if it had not within a few seconds). looks counts
// all looks; gap is the longest time between two consecutive looks, or
// within the last one (the pause), and after_gap the number of looks after
// it that still found the lease held: looks that happened after the
// resume.
//
// All times are UnixNano of the host's clock, which the test shares.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/dlockgo/dlock"
	_ "github.com/dlockgo/dlock/internal/backends"
)

// event is one line of output.
type event struct {
	Kind     string `json:"k"`
	Token    uint64 `json:"t,omitempty"`
	At       int64  `json:"at,omitempty"`
	Last     int64  `json:"last,omitempty"`
	ErrAt    int64  `json:"err_at,omitempty"`
	Err      string `json:"err,omitempty"`
	Lost     bool   `json:"lost,omitempty"`
	DoneAt   int64  `json:"done_at,omitempty"`
	Looks    int64  `json:"looks,omitempty"`
	Gap      int64  `json:"gap,omitempty"`
	AfterGap int64  `json:"after_gap"`
	Msg      string `json:"msg,omitempty"`
}

var out = json.NewEncoder(os.Stdout)

func main() {
	var (
		rawURL  = flag.String("url", "", "backend URL")
		name    = flag.String("name", "resume", "lock name")
		ttl     = flag.Duration("ttl", time.Second, "lock TTL")
		timeout = flag.Duration("timeout", 10*time.Second, "bound of Open and Acquire")
		limit   = flag.Duration("limit", 60*time.Second, "how long to look at most before giving up")
		look    = flag.String("look", "err", `what a look is: "err" (lease.Err()) or "ctx" (Err of the lease's Context)`)
	)
	flag.Parse()
	if err := run(*rawURL, *name, *ttl, *timeout, *limit, *look); err != nil {
		_ = out.Encode(event{Kind: "fail", Msg: err.Error()})
		os.Exit(1)
	}
}

func run(rawURL, name string, ttl, timeout, limit time.Duration, look string) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	locker, err := dlock.Open(ctx, rawURL, dlock.WithTTL(ttl))
	if err != nil {
		return err
	}
	defer locker.Close()
	lease, err := locker.Acquire(ctx, name)
	if err != nil {
		return err
	}
	held := lease.Err
	switch look {
	case "err":
	case "ctx":
		// The lease's context must answer as the lease does: its Err at
		// the first call after the loss, with the loss as its cause.
		lctx, lcancel := lease.Context(context.Background())
		defer lcancel()
		held = func() error {
			if lctx.Err() == nil {
				return nil
			}
			return context.Cause(lctx)
		}
	default:
		return fmt.Errorf("unknown -look %q", look)
	}

	// Done is watched beside the looks, as a careful user would: when it
	// closes tells how late the wake-up came compared with the first look.
	doneAt := make(chan int64, 1)
	go func() {
		<-lease.Done()
		doneAt <- time.Now().UnixNano()
	}()

	if err := out.Encode(event{Kind: "holding", Token: lease.Token(), At: time.Now().UnixNano()}); err != nil {
		return err
	}

	// The time of a look is read BEFORE the look: a pause between the two
	// then makes the recorded time older than the look, never newer, so a
	// stale "held" cannot pass for a fresh one. (The price: a pause landing
	// exactly there hides one look after the resume; the next is counted.)
	var (
		last, prev, gap int64
		looks, afterGap int64
		lookErr         error
		errAt           int64
		deadline        = time.Now().Add(limit)
	)
	for {
		t := time.Now()
		err := held()
		looks++
		tn := t.UnixNano()
		if prev != 0 && tn-prev > gap {
			// A new longest gap: this look is the first after it.
			gap, afterGap = tn-prev, 0
		}
		prev = tn
		if err != nil {
			errAt = time.Now().UnixNano()
			lookErr = err
			// A pause may also land inside this last look, between its
			// time and its answer: that is a gap too, with no held look
			// after it.
			if errAt-tn > gap {
				gap, afterGap = errAt-tn, 0
			}
			break
		}
		last = tn
		afterGap++
		if t.After(deadline) {
			return fmt.Errorf("the lease was still held after %v of looking", limit)
		}
	}
	// Let Done's goroutine report, within reason: a lease whose Err says
	// lost must close Done too.
	var done int64
	select {
	case done = <-doneAt:
	case <-time.After(5 * time.Second):
	}
	rctx, rcancel := context.WithTimeout(context.Background(), timeout)
	_ = lease.Release(rctx) // fails after a loss, as expected
	rcancel()
	return out.Encode(event{
		Kind:     "result",
		Last:     last,
		ErrAt:    errAt,
		Err:      lookErr.Error(),
		Lost:     errors.Is(lookErr, dlock.ErrLost),
		DoneAt:   done,
		Looks:    looks,
		Gap:      gap,
		AfterGap: afterGap,
	})
}
