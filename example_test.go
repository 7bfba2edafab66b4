package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlockgo/dlock"
	_ "github.com/dlockgo/dlock/memlock" // registers mem://
)

// The basic pattern: acquire, defer the release, do the work under the
// lease's context so that it stops if the lock is lost.
func Example() {
	ctx := context.Background()
	locker, err := dlock.Open(ctx, "mem://example")
	if err != nil {
		panic(err)
	}
	defer locker.Close()

	lease, err := locker.Acquire(ctx, "reports/daily", dlock.WithTTL(10*time.Second))
	if err != nil {
		panic(err)
	}
	defer lease.Release(ctx)

	work, cancel := lease.Context(ctx)
	defer cancel()
	fmt.Println("holding", lease.Name(), "- work cancelled:", work.Err() != nil)

	_, err = locker.TryAcquire(ctx, "reports/daily")
	fmt.Println("second TryAcquire:", errors.Is(err, dlock.ErrNotAcquired))
	// Output:
	// holding reports/daily - work cancelled: false
	// second TryAcquire: true
}

// Fencing tokens grow with every acquisition of a name; a resource that
// remembers the highest token it has seen can reject a stale holder.
func ExampleLease_Token() {
	ctx := context.Background()
	locker, err := dlock.Open(ctx, "mem://example-token")
	if err != nil {
		panic(err)
	}
	defer locker.Close()
	var last uint64
	for range 3 {
		lease, err := locker.Acquire(ctx, "stock/sku-1")
		if err != nil {
			panic(err)
		}
		fmt.Println("token increased:", lease.Token() > last)
		last = lease.Token()
		_ = lease.Release(ctx)
	}
	// Output:
	// token increased: true
	// token increased: true
	// token increased: true
}

// A worker hands the lock of a job to its successor, here another Locker
// on the same store (in practice another process, given the handle's text
// in an environment variable or a file): the successor resumes the lease,
// with the same token, and releases it when done.
func ExampleLease_Detach() {
	ctx := context.Background()
	first, err := dlock.Open(ctx, "mem://handoff")
	if err != nil {
		panic(err)
	}
	defer first.Close()
	lease, err := first.Acquire(ctx, "job/42")
	if err != nil {
		panic(err)
	}
	h, err := lease.Detach() // this worker stops renewing it
	if err != nil {
		panic(err)
	}
	text := h.String() // hand this on

	successor, err := dlock.Open(ctx, "mem://handoff")
	if err != nil {
		panic(err)
	}
	defer successor.Close()
	parsed, err := dlock.ParseHandle(text)
	if err != nil {
		panic(err)
	}
	resumed, err := successor.Resume(ctx, parsed)
	if err != nil {
		panic(err)
	}
	fmt.Println(resumed.Name(), resumed.Token() == lease.Token())
	_ = resumed.Release(ctx)
	// Output: job/42 true
}
