package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
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

// A transfer between two accounts locks both. AcquireAll takes them in
// one canonical order, so a transfer the other way cannot deadlock with
// this one; each account's lock has its own fencing token.
func ExampleLocker_AcquireAll() {
	ctx := context.Background()
	locker, err := dlock.Open(ctx, "mem://example-all")
	if err != nil {
		panic(err)
	}
	defer locker.Close()

	set, err := locker.AcquireAll(ctx, []string{"accounts/bob", "accounts/alice"})
	if err != nil {
		panic(err)
	}
	defer set.Release(ctx)

	work, cancel := set.Context(ctx) // cancelled if any of the locks is lost
	defer cancel()
	fmt.Println("holding", set.Names(), "- work cancelled:", work.Err() != nil)
	fmt.Println("alice's token differs from bob's:", set.Token("accounts/alice") != set.Token("accounts/bob"))

	_, err = locker.TryAcquireAll(ctx, []string{"accounts/carol", "accounts/bob"})
	fmt.Println("bob is busy:", errors.Is(err, dlock.ErrNotAcquired))
	// Output:
	// holding [accounts/alice accounts/bob] - work cancelled: false
	// alice's token differs from bob's: true
	// bob is busy: true
}

// Readers share a readers-writer lock; a writer has it alone.
func ExampleLocker_AcquireRead() {
	ctx := context.Background()
	locker, err := dlock.Open(ctx, "mem://example-rw")
	if err != nil {
		panic(err)
	}
	defer locker.Close()

	r1, err := locker.AcquireRead(ctx, "config")
	if err != nil {
		panic(err)
	}
	r2, err := locker.TryAcquireRead(ctx, "config")
	fmt.Println("two readers:", err == nil)

	_, err = locker.TryAcquireWrite(ctx, "config")
	fmt.Println("writer while read:", errors.Is(err, dlock.ErrNotAcquired))

	_ = r1.Release(ctx)
	_ = r2.Release(ctx)
	w, err := locker.TryAcquireWrite(ctx, "config")
	fmt.Println("writer once the readers left:", err == nil)
	_ = w.Release(ctx)
	// Output:
	// two readers: true
	// writer while read: true
	// writer once the readers left: true
}

// A semaphore bounds how many holders work at once: here two.
func ExampleLocker_AcquirePermit() {
	ctx := context.Background()
	locker, err := dlock.Open(ctx, "mem://example-permit")
	if err != nil {
		panic(err)
	}
	defer locker.Close()

	const limit = 2
	for i := range 3 {
		lease, err := locker.TryAcquirePermit(ctx, "exports", limit)
		if err != nil {
			fmt.Printf("job %d: %v\n", i, errors.Is(err, dlock.ErrNotAcquired))
			continue
		}
		fmt.Printf("job %d: got a permit\n", i)
		defer lease.Release(ctx)
	}
	// Output:
	// job 0: got a permit
	// job 1: got a permit
	// job 2: true
}

// One instance leads; others wait in Campaign, and anyone can follow who
// leads with Observe.
func ExampleLocker_Campaign() {
	ctx := context.Background()
	locker, err := dlock.Open(ctx, "mem://example-election")
	if err != nil {
		panic(err)
	}
	defer locker.Close()

	watch, stop := context.WithCancel(ctx)
	defer stop()
	leaders, err := locker.Observe(watch, "scheduler")
	if err != nil {
		panic(err)
	}
	fmt.Printf("leader: %q\n", (<-leaders).Value)

	lead, err := locker.Campaign(ctx, "scheduler", "host-1:8080")
	if err != nil {
		panic(err)
	}
	fmt.Printf("leader: %q\n", (<-leaders).Value)

	_ = lead.Release(ctx) // resign
	fmt.Printf("leader: %q\n", (<-leaders).Value)
	// Output:
	// leader: ""
	// leader: "host-1:8080"
	// leader: ""
}

// An instance that has other work to do tries once for leadership, and
// goes on as a follower when someone else leads.
func ExampleLocker_TryCampaign() {
	ctx := context.Background()
	locker, err := dlock.Open(ctx, "mem://example-try-campaign")
	if err != nil {
		panic(err)
	}
	defer locker.Close()

	lead, err := locker.TryCampaign(ctx, "scheduler", "host-1:8080")
	if err != nil {
		panic(err)
	}
	defer lead.Release(ctx)

	_, err = locker.TryCampaign(ctx, "scheduler", "host-2:8080")
	if errors.Is(err, dlock.ErrNotAcquired) {
		info, _ := locker.Leader(ctx, "scheduler")
		fmt.Printf("host-2 follows %q\n", info.Value)
	}
	// Output:
	// host-2 follows "host-1:8080"
}

// A name class labels every metric about a lock with a bounded class of
// its name, so that a dashboard can tell the contended order locks from
// the nightly report's lock; the names themselves never become labels.
func ExampleWithNameClass() {
	ctx := context.Background()
	byPrefix := func(name string) string {
		class, _, _ := strings.Cut(name, "/") // "orders/42" -> "orders"
		return class
	}
	locker, err := dlock.Open(ctx, "mem://example-class", dlock.WithNameClass(byPrefix))
	if err != nil {
		panic(err)
	}
	defer locker.Close()

	lease, err := locker.Acquire(ctx, "orders/42")
	if err != nil {
		panic(err)
	}
	defer lease.Release(ctx)
	fmt.Println("holding", lease.Name(), "measured as class", byPrefix(lease.Name()))
	// Output:
	// holding orders/42 measured as class orders
}
