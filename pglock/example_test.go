package pglock_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/jackc/pgx/v5"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/pglock"
)

// Open a Locker from a URL, take a lock, and see a second client refused
// while it is held. (It runs against the test server.)
func Example() {
	ctx := context.Background()
	locker, err := dlock.Open(ctx, "postgres://postgres@127.0.0.1:5432/test?sslmode=disable&keepalive=2s")
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	lease, err := locker.Acquire(ctx, "example/orders/42")
	if err != nil {
		log.Fatal(err)
	}
	// The token is the fencing token: pass it to the resource.
	fmt.Println("held, with a token:", lease.Token() > 0)
	// A session lock does not expire: it lives as long as its connection.
	fmt.Println("expires:", !lease.Expires().IsZero())

	_, err = locker.TryAcquire(ctx, "example/orders/42")
	fmt.Println("second try refused:", errors.Is(err, dlock.ErrNotAcquired))

	if err := lease.Release(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("released")
	// Output:
	// held, with a token: true
	// expires: false
	// second try refused: true
	// released
}

// Build a Locker in code, from a pgx configuration and Options. (Not run.)
func ExampleNew() {
	ctx := context.Background()
	cfg, err := pgx.ParseConfig("postgres://locker@10.0.0.5:5432/app?sslmode=verify-full")
	if err != nil {
		log.Fatal(err)
	}
	locker, err := pglock.New(ctx, cfg, &pglock.Options{Table: "locks.dlock_tokens", NoMigrate: true})
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	lease, err := locker.TryAcquire(ctx, "nightly-report")
	if err != nil {
		fmt.Println("someone else runs it:", err)
		return
	}
	defer lease.Release(ctx)
	fmt.Println("running the report with token", lease.Token())
}

// Take a lock for the length of a transaction, as behind PgBouncer in
// transaction pooling mode: it is released at commit or rollback. (It runs
// against the test server.)
func ExampleLockTx() {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close(ctx)
	if err := pglock.Migrate(ctx, conn, pglock.DefaultTable); err != nil {
		log.Fatal(err)
	}

	tx, err := conn.Begin(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback(ctx)
	token, err := pglock.LockTx(ctx, tx, "example/invoices")
	if err != nil {
		log.Fatal(err)
	}
	// ... work in tx, writing token along with the data it guards ...
	fmt.Println("locked with a token:", token > 0)
	if err := tx.Commit(ctx); err != nil { // releases the lock
		log.Fatal(err)
	}
	// Output:
	// locked with a token: true
}
