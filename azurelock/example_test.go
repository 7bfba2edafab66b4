package azurelock_test

import (
	"context"
	"log"
	"os"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/azurelock"
)

// A Locker over a container, through a client of your own; the job runs
// on one instance at a time, and gives the fencing token to what it
// writes. (Compiled, not run: it needs a storage account.)
func ExampleNew() {
	ctx := context.Background()
	client, err := azblob.NewClientFromConnectionString(os.Getenv("AZURE_STORAGE_CONNECTION_STRING"), nil)
	if err != nil {
		log.Fatal(err)
	}
	locker, err := azurelock.New(ctx, client, "my-container", &azurelock.Options{Prefix: "locks/"}, dlock.WithTTL(time.Minute))
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
