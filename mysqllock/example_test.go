package mysqllock_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/mysqllock"
)

// Open two Lockers from a URL, as two processes would, and take a lock in
// turn. (It runs against the MariaDB or MySQL server of the tests, on
// 127.0.0.1:3306, database test.)
func Example() {
	ctx := context.Background()
	const url = "mysql://root@127.0.0.1:3306/test?table=dlock_example&keepalive=500ms"
	a, err := dlock.Open(ctx, url)
	if err != nil {
		log.Fatal(err)
	}
	defer a.Close()
	b, err := dlock.Open(ctx, url)
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()

	lease, err := a.Acquire(ctx, "Orders/42", dlock.WithTTL(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("server-side name:", a.Driver().(*mysqllock.Driver).LockName("Orders/42"))

	// Another client cannot take it while it is held.
	_, err = b.TryAcquire(ctx, "Orders/42")
	fmt.Println("held elsewhere:", errors.Is(err, dlock.ErrNotAcquired))

	// Work under a context that ends if the lock is lost, passing the
	// fencing token to the resource.
	work, cancel := lease.Context(ctx)
	_ = work
	first := lease.Token()
	cancel()
	if err := lease.Release(ctx); err != nil {
		log.Fatal(err)
	}

	next, err := b.Acquire(ctx, "Orders/42")
	if err != nil {
		log.Fatal(err)
	}
	defer next.Release(ctx)
	fmt.Println("next token is greater:", next.Token() > first)
	// Output:
	// server-side name: dlock:^orders/42
	// held elsewhere: true
	// next token is greater: true
}

// Build a Locker on a *sql.DB of your own, with the token table created
// ahead of time. (Not run.)
func ExampleNew() {
	db, err := sql.Open("mysql", "app:secret@tcp(10.0.0.5:3306)/app")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	// One connection per held lock and per waiter, kept idle between uses.
	db.SetMaxOpenConns(64)
	db.SetMaxIdleConns(16)

	d, err := mysqllock.NewDriver(db, &mysqllock.Options{Table: "app_locks", Prefix: "app:"})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	if err := d.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	locker, err := dlock.New(d, dlock.WithTTL(15*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close() // closes the driver, not db

	lease, err := locker.TryAcquire(ctx, "nightly-report")
	if err != nil {
		fmt.Println("someone else runs it:", err)
		return
	}
	defer lease.Release(ctx)
	fmt.Println("running the report")
}
