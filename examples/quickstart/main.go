// Command quickstart shows dlock's main job with no server at all: three
// workers (the "instances" of a service) race to run a nightly job that
// must run once, then take turns on a shared counter with fencing tokens.
//
//	go run ./examples/quickstart
//
// It uses the in-process mem:// backend; change the URL to
// redis://127.0.0.1:6379 (and import redislock) to coordinate real
// processes.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sync"
	"time"

	"github.com/dlockgo/dlock"
	_ "github.com/dlockgo/dlock/memlock"
)

func main() {
	ctx := context.Background()
	locker, err := dlock.Open(ctx, "mem://quickstart?ttl=5s")
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	// 1. The cron case: every instance tries; exactly one runs the job.
	var wg sync.WaitGroup
	var mu sync.Mutex
	for i := 1; i <= 3; i++ {
		wg.Go(func() {
			lease, err := locker.TryAcquire(ctx, "cron/nightly-report")
			mu.Lock()
			defer mu.Unlock()
			switch {
			case errors.Is(err, dlock.ErrNotAcquired):
				fmt.Printf("instance %d: job already running elsewhere, skipping\n", i)
			case err != nil:
				log.Fatal(err)
			default:
				fmt.Printf("instance %d: running the nightly report (token %d)\n", i, lease.Token())
				time.AfterFunc(100*time.Millisecond, func() { _ = lease.Release(ctx) })
			}
		})
	}
	wg.Wait()

	// 2. Waiting: three workers update shared stock one at a time; each
	// write carries a fencing token greater than the last.
	stock, lastToken := 10, uint64(0)
	for i := 1; i <= 3; i++ {
		wg.Go(func() {
			for range 2 {
				lease, err := locker.Acquire(ctx, "stock/sku-42")
				if err != nil {
					log.Fatal(err)
				}
				mu.Lock()
				if lease.Token() <= lastToken {
					log.Fatalf("stale token %d after %d", lease.Token(), lastToken)
				}
				lastToken = lease.Token()
				stock--
				fmt.Printf("worker %d sold one (token %d), stock now %d\n", i, lease.Token(), stock)
				mu.Unlock()
				_ = lease.Release(ctx)
			}
		})
	}
	wg.Wait()
	fmt.Printf("sold 6, stock %d: never oversold, tokens always increasing\n", stock)
}
