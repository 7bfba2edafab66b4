package filelock_test

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/filelock"
)

// Open a lock directory by URL, take a lock, and see the file that holds
// it.
func Example() {
	dir, err := os.MkdirTemp("", "filelock-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)

	ctx := context.Background()
	locker, err := dlock.Open(ctx, "file://"+dir) // or "file://" for the per-user default
	if err != nil {
		panic(err)
	}
	defer locker.Close()

	lease, err := locker.Acquire(ctx, "reports/daily")
	if err != nil {
		panic(err)
	}
	fmt.Println("holding", lease.Name())

	_, err = locker.TryAcquire(ctx, "reports/daily")
	fmt.Println("second TryAcquire:", errors.Is(err, dlock.ErrNotAcquired))

	if err := lease.Release(ctx); err != nil {
		panic(err)
	}
	files, _ := os.ReadDir(dir)
	for _, f := range files {
		fmt.Println("lock file:", f.Name()) // it stays after the release
	}
	// Output:
	// holding reports/daily
	// second TryAcquire: true
	// lock file: reports%daily.lock
}

// New takes Options in code: here lock files a group can share.
func ExampleNew() {
	dir, err := os.MkdirTemp("", "filelock-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)

	ctx := context.Background()
	locker, err := filelock.New(dir, &filelock.Options{Mode: 0o660})
	if err != nil {
		panic(err)
	}
	defer locker.Close()

	first, err := locker.TryAcquire(ctx, "deploy")
	if err != nil {
		panic(err)
	}
	first.Release(ctx)
	second, err := locker.TryAcquire(ctx, "deploy")
	if err != nil {
		panic(err)
	}
	defer second.Release(ctx)
	fmt.Println("tokens increase:", second.Token() > first.Token())

	fi, _ := os.Stat(dir + "/deploy.lock")
	fmt.Println("mode:", fi.Mode().Perm())
	// Output:
	// tokens increase: true
	// mode: -rw-rw----
}
