package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/fence"
)

const demoHelp = `Usage: dlock demo [flags]

Plays the overselling story in three acts, in about a second:

 1. Without a lock, several workers sell from a limited stock: each reads
    the stock, takes a moment (a slow database round trip), then writes it
    back less one. They read the same values and sell more than there is.
 2. With a lock around each read-and-write, they sell exactly the stock.
 3. With a lock whose holder is paused past its TTL (automatic renewal
    off, a pause longer than the TTL), the lock alone is not enough: the
    next holder sells, then the paused one wakes up and writes a stale
    value. A fencing guard (package fence) rejects that write, because its
    token is lower than one it has already seen.

By default it runs on lock files in a temporary directory, removed at the
end: no server needed. --backend (or $DLOCK_BACKEND) runs it on any
backend.
`

const demoExamples = `  dlock demo
  dlock demo --workers 8 --stock 20
  dlock demo --backend redis://127.0.0.1:6379
`

// demoStep is the pause between a worker's read and its write: the slow
// round trip that opens the race.
const demoStep = 2 * time.Millisecond

func cmdDemo(ctx context.Context, sio *stdio, args []string) int {
	f := newFlags("demo", demoHelp, demoExamples)
	f.Lookup("backend").Usage = "backend `URL` (default $" + envBackend + ", else lock files in a temporary directory, removed at the end)"
	workers := f.Int("workers", 5, "number of concurrent workers")
	stock := f.Int("stock", 10, "items in stock")
	if code, ok := f.parseNone(sio, args); !ok {
		return code
	}
	switch {
	case *workers < 2 || *workers > 100:
		return usageErr(sio, f.cmd, "--workers %d: want 2 to 100", *workers)
	case *stock < 1 || *stock > 10000:
		return usageErr(sio, f.cmd, "--stock %d: want 1 to 10000", *stock)
	}
	log, err := f.logger(sio.err)
	if err != nil {
		return usageErr(sio, f.cmd, "%v", err)
	}
	backend := ""
	if len(f.backends) > 0 || os.Getenv(envBackend) != "" {
		backend = f.backend()
	} else {
		dir, err := os.MkdirTemp("", "dlock-demo-")
		if err != nil {
			return failf(sio, exitFailure, f.cmd, "%v", err)
		}
		defer os.RemoveAll(dir)
		backend = "file://" + dir
	}
	locker, code := openLocker(ctx, sio, f.cmd, backend, dlock.WithLogger(log))
	if locker == nil {
		return code
	}
	defer locker.Close()
	// A name of its own per run, so that runs on a shared backend never meet.
	name := "dlock-demo/stock-" + newID()
	d := &demo{out: sio.out, locker: locker, name: name, workers: *workers, stock: *stock}
	fmt.Fprintf(sio.out, "%d workers sell from a stock of %d items, on %s.\n\n", d.workers, d.stock, redact(backend))
	d.withoutLock()
	if err := d.withLock(ctx); err != nil {
		return failf(sio, exitUnavailable, f.cmd, "%s", oneLine(err))
	}
	if err := d.fenced(ctx); err != nil {
		return failf(sio, exitUnavailable, f.cmd, "%s", oneLine(err))
	}
	return exitOK
}

// demo is the shared state of the demonstration.
type demo struct {
	out     io.Writer
	locker  *dlock.Locker
	name    string
	workers int
	stock   int
}

// shop is the stock, as a database with no transactions would keep it:
// reads and writes are each atomic, a read followed by a write is not.
type shop struct {
	stock atomic.Int64
	sold  atomic.Int64
}

// sellOne reads the stock, waits demoStep and writes it back less one. It
// reports false when it read an empty stock.
func (s *shop) sellOne() bool {
	n := s.stock.Load()
	if n <= 0 {
		return false
	}
	time.Sleep(demoStep)
	s.stock.Store(n - 1)
	s.sold.Add(1)
	return true
}

// runWorkers starts the workers together and waits for them.
func (d *demo) runWorkers(work func(w int)) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for w := range d.workers {
		wg.Go(func() {
			<-start
			work(w)
		})
	}
	close(start)
	wg.Wait()
}

func (d *demo) withoutLock() {
	var s shop
	s.stock.Store(int64(d.stock))
	d.runWorkers(func(int) {
		for s.sellOne() {
		}
	})
	sold := s.sold.Load()
	fmt.Fprintf(d.out, "1. Without a lock: sold %d items from a stock of %d", sold, d.stock)
	if over := sold - int64(d.stock); over > 0 {
		fmt.Fprintf(d.out, " — OVERSOLD by %d.\n", over)
	} else {
		fmt.Fprintln(d.out, " (no oversell this time: the race was not hit).")
	}
}

func (d *demo) withLock(ctx context.Context) error {
	var s shop
	s.stock.Store(int64(d.stock))
	var (
		mu       sync.Mutex
		firstErr error
		acquired int
	)
	d.runWorkers(func(int) {
		for {
			lease, err := d.locker.Acquire(ctx, d.name)
			if err != nil {
				mu.Lock()
				firstErr = cmp.Or(firstErr, err)
				mu.Unlock()
				return
			}
			more := s.sellOne()
			err = lease.Release(ctx)
			mu.Lock()
			acquired++
			firstErr = cmp.Or(firstErr, err)
			mu.Unlock()
			if !more || err != nil {
				return
			}
		}
	})
	if firstErr != nil {
		return firstErr
	}
	sold := s.sold.Load()
	fmt.Fprintf(d.out, "2. With a lock:    sold %d items from a stock of %d", sold, d.stock)
	if sold == int64(d.stock) {
		fmt.Fprintf(d.out, " — correct (%d acquisitions).\n", acquired)
	} else {
		fmt.Fprintf(d.out, " — WRONG: the lock did not exclude.\n")
	}
	return nil
}

// fenced plays act 3: a holder paused past its TTL, a successor, and the
// guard that rejects the paused holder's stale write.
func (d *demo) fenced(ctx context.Context) error {
	const ttl = 200 * time.Millisecond
	const pause = 3 * ttl
	var guard fence.Memory
	var stock atomic.Int64
	stock.Store(int64(d.stock))
	write := func(token uint64, v int64) error {
		return guard.Do(ctx, "stock", token, func() error {
			stock.Store(v)
			return nil
		})
	}
	fmt.Fprintf(d.out, "3. With a lock and a fencing guard, worker 1 pauses for %v (its TTL is %v, renewal off):\n", pause, ttl)

	a, err := d.locker.Acquire(ctx, d.name, dlock.WithTTL(ttl), dlock.WithAutoRenew(false))
	if err != nil {
		return err
	}
	readA := stock.Load()
	fmt.Fprintf(d.out, "   worker 1 takes the lock (token %d), reads stock %d, and freezes...\n", a.Token(), readA)

	// Worker 2 waits for the lock, freed when worker 1's TTL runs out.
	type result struct {
		token uint64
		wrote int64
		err   error
	}
	bDone := make(chan result, 1)
	go func() {
		b, err := d.locker.Acquire(ctx, d.name)
		if err != nil {
			bDone <- result{err: err}
			return
		}
		n := stock.Load()
		err = write(b.Token(), n-1)
		bDone <- result{token: b.Token(), wrote: n - 1, err: errors.Join(err, b.Release(ctx))}
	}()

	time.Sleep(pause)
	select {
	case <-a.Done():
		fmt.Fprintf(d.out, "   worker 1's lease expired while it was frozen (%v)\n", a.Err())
	default:
		fmt.Fprintf(d.out, "   worker 1's lease has not expired yet\n")
	}
	b := <-bDone
	if b.err != nil {
		return b.err
	}
	fmt.Fprintf(d.out, "   worker 2 takes the lock (token %d) and sells one: stock %d\n", b.token, b.wrote)
	err = write(a.Token(), readA-1)
	if se, ok := errors.AsType[*fence.StaleError](err); ok {
		fmt.Fprintf(d.out, "   worker 1 wakes up and writes stock %d with token %d: REJECTED (highest seen: %d)\n", readA-1, se.Token, se.Highest)
		fmt.Fprintf(d.out, "   Without the guard that write would have sold one item twice; stock stays %d.\n", stock.Load())
	} else {
		fmt.Fprintf(d.out, "   worker 1 wakes up and writes stock %d with token %d: accepted (%v) — WRONG\n", readA-1, a.Token(), err)
	}
	_ = a.Release(ctx) // already lost: reports ErrNotHeld
	return nil
}
