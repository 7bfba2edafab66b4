package gocronlock_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/go-co-op/gocron/v2"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/gocronlock"
	_ "github.com/dlockgo/dlock/memlock"
)

// Every instance of a service runs the same schedule with a Locker over
// the shared backend; each run of the job happens on one instance only.
// (Here, lock files in a temporary directory: use a server's URL, such as
// redis://host:6379, for instances on several machines.)
func ExampleNew() {
	dir, _ := os.MkdirTemp("", "gocronlock-example-")
	defer os.RemoveAll(dir)
	locker, err := dlock.Open(context.Background(), "file://"+dir)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer locker.Close()

	jobs := gocronlock.New(locker, gocronlock.WithMinHold(10*time.Second))
	s, err := gocron.NewScheduler(gocron.WithDistributedLocker(jobs))
	if err != nil {
		fmt.Println(err)
		return
	}
	done := make(chan struct{})
	_, err = s.NewJob(
		gocron.OneTimeJob(gocron.OneTimeJobStartImmediately()),
		gocron.NewTask(func() { fmt.Println("report sent"); close(done) }),
		gocron.WithName("daily-report"), // the lock's name: the same on every instance
	)
	if err != nil {
		fmt.Println(err)
		return
	}
	s.Start()
	<-done
	_ = s.Shutdown()
	fmt.Println("lock:", jobs.LockName("daily-report"))
	// Output:
	// report sent
	// lock: gocron/daily-report
}

// One instance leads and runs the jobs; the others take over if it goes.
// (Here, an in-process backend: use a server's URL for instances on
// several machines.)
func ExampleNewElector() {
	locker, err := dlock.Open(context.Background(), "mem://gocronlock-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer locker.Close()

	elector, err := gocronlock.NewElector(locker, "billing-scheduler", "")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer elector.Close()
	s, err := gocron.NewScheduler(gocron.WithDistributedElector(elector))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Shutdown()
	for elector.IsLeader(context.Background()) != nil { // alone, it soon leads
		time.Sleep(10 * time.Millisecond)
	}
	fmt.Println("leading")
	// Output: leading
}
