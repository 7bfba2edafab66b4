package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/redlock"
)

// Opening a Locker from a URL. Nothing listens on these three loopback
// ports, so no quorum can answer: the attempt fails with ErrNoQuorum,
// which is not ErrNotAcquired (nobody holds the lock; the nodes could not
// decide).
func Example() {
	ctx := context.Background()
	locker, err := dlock.Open(ctx, "redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3?node_timeout=10ms")
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	_, err = locker.TryAcquire(ctx, "orders/42")
	fmt.Println("no quorum:", errors.Is(err, dlock.ErrNoQuorum))
	fmt.Println("held by another:", errors.Is(err, dlock.ErrNotAcquired))
	// Output:
	// no quorum: true
	// held by another: false
}

// A Locker over go-redis clients of your own, one per master.
func ExampleNew() {
	var clients []redis.UniversalClient
	for _, addr := range []string{"127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003", "127.0.0.1:7004", "127.0.0.1:7005"} {
		clients = append(clients, redis.NewClient(&redis.Options{
			Addr:                  addr,
			ContextTimeoutEnabled: true, // the node timeout bounds socket reads
			MaxRetries:            -1,   // a dead node fails at once
			DialerRetries:         1,
		}))
	}
	locker, err := redlock.New(clients, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	ctx := context.Background()
	// Optional: dial every node and load the scripts now, not on the
	// first lock.
	if err := locker.Driver().(*redlock.Driver).Prepare(ctx); err != nil {
		log.Print(err) // fewer than a quorum of nodes answered
	}
	lease, err := locker.Acquire(ctx, "orders/42")
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx)
	// Pass lease.Token() to the resource, which rejects lower tokens.
	fmt.Println(lease.Token() > 0)
}
