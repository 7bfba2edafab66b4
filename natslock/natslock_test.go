package natslock_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/locktest"
	"github.com/dlockgo/dlock/natslock"
)

// conformance runs the suite on c with a bucket of replicas servers.
func conformance(t *testing.T, c *testenv.NATSCluster, replicas int) {
	o := &natslock.Options{Bucket: randomBucket(), Replicas: replicas}
	kv := func() jetstream.KeyValue {
		newDriver(t, c, o) // creates the bucket
		return admin(t, c, o.Bucket)
	}()
	locktest.Run(t, locktest.Harness{
		NewLocker: func(t *testing.T, opts ...dlock.Option) *dlock.Locker {
			return newLocker(t, c, o, opts...)
		},
		TakeAway: func(t *testing.T, name string) {
			if err := kv.Purge(ctxTimeout(t, 10*time.Second), "mutex."+natslock.EncodeName(name)); err != nil {
				t.Fatalf("purge %q: %v", name, err)
			}
		},
		// The server keeps a key's TTL in whole seconds.
		TTL: time.Second,
	})
}

// TestConformance runs the conformance suite on one server.
func TestConformance(t *testing.T) {
	conformance(t, testenv.StartNATS(t, 1), 1)
}

// TestConformanceCluster runs the conformance suite on a 3-server
// cluster with a bucket replicated on all three.
func TestConformanceCluster(t *testing.T) {
	conformance(t, testenv.StartNATS(t, 3), 3)
}
