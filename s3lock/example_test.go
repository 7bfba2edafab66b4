package s3lock_test

import (
	"context"
	"log"
	"time"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/s3lock"
)

// A Locker over a bucket, through a client of your own; the job runs on
// one instance at a time, and gives the fencing token to what it writes.
// (Compiled, not run: it needs a bucket.)
func ExampleNew() {
	ctx := context.Background()
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		log.Fatal(err)
	}
	locker, err := s3lock.New(ctx, s3.NewFromConfig(cfg), "my-bucket", &s3lock.Options{Prefix: "locks/"}, dlock.WithTTL(time.Minute))
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
