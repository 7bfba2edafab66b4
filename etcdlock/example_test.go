package etcdlock_test

import (
	"context"
	"log"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/etcdlock"
)

// A Locker over a client of your own, for TLS or credentials; closing the
// Locker leaves the client open.
func ExampleNew() {
	ctx := context.Background()
	client, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{"127.0.0.1:2379", "127.0.0.1:22379", "127.0.0.1:32379"},
		DialTimeout: 5 * time.Second,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	locker, err := etcdlock.New(client, &etcdlock.Options{Prefix: "myapp/locks"}, dlock.WithTTL(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	lease, err := locker.Acquire(ctx, "reports/daily")
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx)
	// Pass lease.Token(), the key's create revision, to the resource.
}

// Open from a URL: three members, key prefix "jobs", a 10s TTL.
func Example_open() {
	ctx := context.Background()
	locker, err := dlock.Open(ctx, "etcd://127.0.0.1:2379,127.0.0.1:22379,127.0.0.1:32379/jobs?ttl=10s&dial_timeout=2s")
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()
	if lease, err := locker.TryAcquire(ctx, "nightly"); err == nil {
		defer lease.Release(ctx)
	}
}
