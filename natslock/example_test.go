package natslock_test

import (
	"context"
	"log"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/natslock"
)

// A Locker over a connection of your own, for credentials or TLS of your
// choice; closing the Locker leaves the connection open. Without a
// reconnect buffer, nothing published while reconnecting is sent late.
func ExampleNewConn() {
	ctx := context.Background()
	nc, err := nats.Connect("nats://127.0.0.1:4222,nats://127.0.0.1:4223,nats://127.0.0.1:4224",
		nats.MaxReconnects(-1), nats.ReconnectBufSize(-1))
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	locker, err := natslock.NewConn(ctx, nc, &natslock.Options{Bucket: "locks", Replicas: 3}, dlock.WithTTL(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	lease, err := locker.Acquire(ctx, "reports/daily")
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx)
	// Pass lease.Token(), the key's revision, to the resource.
}

// Open from a URL: three servers, the bucket "jobs" on all three, a 10s
// TTL.
func Example_open() {
	ctx := context.Background()
	locker, err := dlock.Open(ctx, "nats://127.0.0.1:4222,127.0.0.1:4223,127.0.0.1:4224/jobs?replicas=3&ttl=10s")
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()
	if lease, err := locker.TryAcquire(ctx, "nightly"); err == nil {
		defer lease.Release(ctx)
	}
}
