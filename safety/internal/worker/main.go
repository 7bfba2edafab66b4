// Command worker is the safety suite's client process: for a given time
// it repeatedly acquires one lock on a dlock backend URL, writes to the
// fenced resource (an HTTP endpoint of the test) with the lease's token,
// and releases. It writes one JSON line per event on stdout:
//
//	{"k":"enter","c":1,"t":42,"at":1700000000000000000}   acquired, token 42
//	{"k":"acq","c":1,"t":42,"call":...,"enter":...,"wcall":...,"exit":...,"rel":...,"w":"ok"}
//	                                       section done and released
//	                                       ("lost":true and "lostAt" if the lease had ended by then)
//	{"k":"err","c":1,"call":...,"at":...,"msg":"..."}        an acquire called at call failed at at
//	{"k":"obs","c":1,"t":42,"at":...,"msg":"2"}             Observe showed leader "2", token 42
//
// The write goes out after the hold time whatever happens meanwhile: the
// worker behaves like a holder that was paused (or cut off) between its
// last check of the lease and its write, which is the case fencing
// exists for.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlockgo/dlock"
	_ "github.com/dlockgo/dlock/internal/backends"
)

// event is one line of output.
type event struct {
	Kind  string `json:"k"`
	Cl    int    `json:"c"`
	Token uint64 `json:"t,omitempty"`
	At    int64  `json:"at,omitempty"`
	Call  int64  `json:"call,omitempty"`
	Enter int64  `json:"enter,omitempty"`
	// WriteCall is when the write was sent; Exit, when its reply came.
	WriteCall int64 `json:"wcall,omitempty"`
	Exit      int64 `json:"exit,omitempty"`
	// Released is when the Release call returned.
	Released int64  `json:"rel,omitempty"`
	Write    string `json:"w,omitempty"`
	Lost     bool   `json:"lost,omitempty"`
	// LostAt is when the lease's Done channel closed, if it had by Exit.
	LostAt int64 `json:"lostAt,omitempty"`
	// HeldAt is the time read before the last look at Err that found the
	// lease held (looks every 2ms, and at Exit).
	HeldAt int64 `json:"heldAt,omitempty"`
	// Mode is the kind taken (read, write, permit, leader; empty: mutex),
	// and Limit the semaphore's limit.
	Mode  string `json:"m,omitempty"`
	Limit int    `json:"n,omitempty"`
	Msg   string `json:"msg,omitempty"`
}

var (
	outMu sync.Mutex
	out   = json.NewEncoder(os.Stdout)
)

func emit(e event) {
	outMu.Lock()
	defer outMu.Unlock()
	_ = out.Encode(e)
}

func main() {
	var (
		rawURL   = flag.String("url", "", "backend URL")
		name     = flag.String("name", "safety", "lock name")
		id       = flag.Int("id", 0, "client id")
		dur      = flag.Duration("dur", 3*time.Second, "how long to run")
		ttl      = flag.Duration("ttl", time.Second, "lock TTL")
		hold     = flag.Duration("hold", 20*time.Millisecond, "time between acquiring and writing")
		resource = flag.String("resource", "", "URL of the fenced resource's write endpoint")
		timeout  = flag.Duration("timeout", 5*time.Second, "bound of one acquire call")
		kind     = flag.String("kind", "mutex", "what to take: mutex, rw (2 reads to 1 write), permit (of -limit), leader (Campaign, and Observe)")
		limit    = flag.Int("limit", 2, "the semaphore's limit, with -kind permit")
	)
	flag.Parse()
	k := takeKind{kind: *kind, limit: *limit, id: *id}
	if err := run(*rawURL, *name, *id, *dur, *ttl, *hold, *resource, *timeout, k); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}

// takeKind is what the worker takes each round.
type takeKind struct {
	kind  string
	limit int
	id    int
}

// take acquires one lease of the kind, in round's mode, and returns it
// with the mode's name for the record.
func (k takeKind) take(ctx context.Context, l *dlock.Locker, name string, round int) (*dlock.Lease, string, error) {
	switch k.kind {
	case "rw":
		if (round+k.id)%3 == 2 {
			lease, err := l.AcquireWrite(ctx, name)
			return lease, "write", err
		}
		lease, err := l.AcquireRead(ctx, name)
		return lease, "read", err
	case "permit":
		lease, err := l.AcquirePermit(ctx, name, k.limit)
		return lease, "permit", err
	case "leader":
		lease, err := l.Campaign(ctx, name, strconv.Itoa(k.id))
		return lease, "leader", err
	default:
		lease, err := l.Acquire(ctx, name)
		return lease, "", err
	}
}

// observe follows the election with Observe until ctx ends, and writes
// one "obs" line per leader it shows.
func observe(ctx context.Context, l *dlock.Locker, name string, id int) {
	for ctx.Err() == nil {
		ch, err := l.Observe(ctx, name)
		if err != nil {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		for info := range ch {
			emit(event{Kind: "obs", Cl: id, Token: info.Token, At: time.Now().UnixNano(), Msg: info.Value})
		}
	}
}

func run(rawURL, name string, id int, dur, ttl, hold time.Duration, resource string, timeout time.Duration, k takeKind) error {
	ctx := context.Background()
	var locker *dlock.Locker
	var err error
	// The backend may be down at the start (a fault in progress): retry.
	for deadline := time.Now().Add(dur); ; {
		octx, cancel := context.WithTimeout(ctx, timeout)
		locker, err = dlock.Open(octx, rawURL, dlock.WithTTL(ttl))
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
	defer locker.Close()
	client := &http.Client{Timeout: 5 * time.Second}
	end := time.Now().Add(dur)
	if k.kind == "leader" {
		octx, stop := context.WithDeadline(ctx, end.Add(time.Second))
		defer stop()
		go observe(octx, locker, name, id)
	}
	for round := 0; time.Now().Before(end); round++ {
		actx, cancel := context.WithTimeout(ctx, min(timeout, time.Until(end)+time.Second))
		call := time.Now().UnixNano()
		lease, mode, err := k.take(actx, locker, name, round)
		cancel()
		if err != nil {
			emit(event{Kind: "err", Cl: id, Call: call, At: time.Now().UnixNano(), Msg: err.Error()})
			time.Sleep(20 * time.Millisecond)
			continue
		}
		enter := time.Now().UnixNano()
		emit(event{Kind: "enter", Cl: id, Token: lease.Token(), At: enter})
		var lostAt atomic.Int64 // when Done closed: the holder was told
		watched := make(chan struct{})
		go func() { // ends when Done closes: at the loss, or at Release
			defer close(watched)
			<-lease.Done()
			lostAt.Store(time.Now().UnixNano())
		}()
		stopLooks := make(chan struct{})
		looks := look(lease, stopLooks)
		time.Sleep(hold)
		wcall := time.Now().UnixNano()
		w := ""
		if resource != "" {
			w = write(client, resource, id, lease.Token())
		}
		exit := time.Now().UnixNano()
		lost := lease.Err() != nil
		close(stopLooks)
		heldAt := <-looks
		switch {
		case !lost:
			heldAt = exit
		case heldAt == 0: // stopped before its first look: held at the grant
			heldAt = enter
		}
		var at int64
		if lost {
			select { // Done closes with the loss: wait for its time
			case <-watched:
				at = min(lostAt.Load(), exit)
			case <-time.After(time.Second):
			}
		}
		rctx, cancel := context.WithTimeout(ctx, timeout)
		_ = lease.Release(rctx) // fails after a loss: expected under faults
		cancel()
		emit(event{Kind: "acq", Cl: id, Token: lease.Token(), Call: call, Enter: enter, WriteCall: wcall, Exit: exit,
			Released: time.Now().UnixNano(), Write: w, Lost: lost, LostAt: at, HeldAt: heldAt, Mode: mode, Limit: k.limit})
	}
	return nil
}

// look looks at the lease's Err every 2ms until stop closes or a look
// finds it lost, and then sends the time read before the last look that
// found it held (0: none did). The time is read before each look, so that
// a pause between the two can only make a look seem older.
func look(lease *dlock.Lease, stop <-chan struct{}) <-chan int64 {
	last := make(chan int64, 1)
	go func() {
		var held int64
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			t := time.Now().UnixNano()
			if lease.Err() != nil {
				break
			}
			held = t
			select {
			case <-stop:
				last <- held
				return
			case <-tick.C:
			}
		}
		last <- held
	}()
	return last
}

// write sends one write with token to the resource and says how it went:
// "ok", "stale" (refused with 409) or an error.
func write(c *http.Client, resource string, id int, token uint64) string {
	v := url.Values{"c": {strconv.Itoa(id)}, "t": {strconv.FormatUint(token, 10)}}
	resp, err := c.PostForm(resource, v)
	if err != nil {
		return "err: " + err.Error()
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	switch resp.StatusCode {
	case http.StatusOK:
		return "ok"
	case http.StatusConflict:
		return "stale"
	default:
		return "err: " + resp.Status
	}
}
