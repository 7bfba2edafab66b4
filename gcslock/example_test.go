package gcslock_test

import (
	"context"
	"log"
	"time"

	"cloud.google.com/go/storage"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/gcslock"
)

// A Locker over a bucket, through a client of your own; the job runs on
// one instance at a time, and gives the fencing token to what it writes.
// (Compiled, not run: it needs a bucket.)
func ExampleNew() {
	ctx := context.Background()
	client, err := storage.NewClient(ctx) // application default credentials
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	locker, err := gcslock.New(ctx, client, "my-bucket", &gcslock.Options{Prefix: "locks/"}, dlock.WithTTL(time.Minute))
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()
	lease, err := locker.Acquire(ctx, "nightly-report")
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(context.WithoutCancel(ctx))
	log.Printf("running with token %d", lease.Token())
}
