package zklock_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/zklock"
)

// Open a Locker from a URL listing the ensemble's servers and the prefix
// under which locks live. (Not run: it needs an ensemble.)
func Example_open() {
	ctx := context.Background()
	locker, err := dlock.Open(ctx, "zk://127.0.0.1:21811,127.0.0.1:21812,127.0.0.1:21813/myapp/locks?session_timeout=5s")
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	lease, err := locker.Acquire(ctx, "orders/42")
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx)

	// The token is the lock node's czxid: pass it to the resource.
	fmt.Println("holding orders/42 with token", lease.Token())

	// Done closes if the session is lost (or the node deleted).
	work, cancel := lease.Context(ctx)
	defer cancel()
	_ = work
}

// Build a Locker in code, with options. (Not run: it needs a server.)
func ExampleNew() {
	locker, err := zklock.New([]string{"127.0.0.1:21810"}, &zklock.Options{
		Prefix:         "/myapp/locks",
		SessionTimeout: 5 * time.Second,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	ctx := context.Background()
	lease, err := locker.TryAcquire(ctx, "nightly-report")
	if err != nil {
		fmt.Println("someone else runs it:", err)
		return
	}
	defer lease.Release(ctx)
	fmt.Println("running the report")
}
