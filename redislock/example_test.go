package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/redislock"
)

func Example() {
	ctx := context.Background()
	// ContextTimeoutEnabled lets a context's deadline bound each call's
	// socket I/O, so that a lone call can be sent by its caller (see
	// Requests in the package documentation).
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	defer client.Close() // the Locker never closes a client it was given

	locker, err := redislock.New(client, &redislock.Options{Prefix: "example:"})
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	lease, err := locker.Acquire(ctx, "reports/daily", dlock.WithTTL(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("holding", lease.Name())

	// Another attempt fails at once while the lease is held.
	_, err = locker.TryAcquire(ctx, "reports/daily")
	fmt.Println("second attempt:", errors.Is(err, dlock.ErrNotAcquired))

	// Tokens of later acquisitions are greater: pass them to the resource.
	first := lease.Token()
	if err := lease.Release(ctx); err != nil {
		log.Fatal(err)
	}
	lease, err = locker.Acquire(ctx, "reports/daily")
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx)
	fmt.Println("token increased:", lease.Token() > first)
	// Output:
	// holding reports/daily
	// second attempt: true
	// token increased: true
}

func Example_open() {
	ctx := context.Background()
	locker, err := dlock.Open(ctx, "redis://127.0.0.1:6379/0?prefix=example:&ttl=5s")
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close() // closes the client the URL opened

	lease, err := locker.TryAcquire(ctx, "jobs/cleanup")
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx)
	fmt.Println("TTL:", lease.TTL())
	// Output:
	// TTL: 5s
}

func Example_kinds() {
	ctx := context.Background()
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	locker, err := redislock.New(client, &redislock.Options{Prefix: "example:kinds:"})
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	// Readers share a readers-writer lock; a writer waits for them.
	r1, err := locker.AcquireRead(ctx, "catalog")
	if err != nil {
		log.Fatal(err)
	}
	r2, err := locker.AcquireRead(ctx, "catalog")
	if err != nil {
		log.Fatal(err)
	}
	_, err = locker.TryAcquireWrite(ctx, "catalog")
	fmt.Println("writer while read:", errors.Is(err, dlock.ErrNotAcquired))
	r1.Release(ctx)
	r2.Release(ctx)

	// At most two holders of the semaphore "exports".
	p1, _ := locker.AcquirePermit(ctx, "exports", 2)
	p2, _ := locker.AcquirePermit(ctx, "exports", 2)
	_, err = locker.TryAcquirePermit(ctx, "exports", 2)
	fmt.Println("third permit:", errors.Is(err, dlock.ErrNotAcquired))
	p1.Release(ctx)
	p2.Release(ctx)

	// Leadership, readable by anyone.
	lead, err := locker.Campaign(ctx, "scheduler", "node-1:8080")
	if err != nil {
		log.Fatal(err)
	}
	info, err := locker.Leader(ctx, "scheduler")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("leader:", info.Value, info.Token == lead.Token())
	lead.Release(ctx)
	// Output:
	// writer while read: true
	// third permit: true
	// leader: node-1:8080 true
}
