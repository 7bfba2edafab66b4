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

// randomBucket keeps tests apart on one server.
func randomBucket() string { return "test-" + locktest.RandomHex(4) }

var (
	ctxTimeout = locktest.Context
	request    = locktest.Request // the mutex name with a fresh owner
)

// newLocker returns a Locker on a connection of its own, as another
// process would have; both are closed when t ends.
func newLocker(t testing.TB, c *testenv.NATSCluster, o *natslock.Options, opts ...dlock.Option) *dlock.Locker {
	t.Helper()
	return locktest.Opened(t)(natslock.NewConn(ctxTimeout(t, 30*time.Second), c.Conn(t), o, opts...))
}

// newDriver returns a driver on a connection of its own, closed when t
// ends.
func newDriver(t testing.TB, c *testenv.NATSCluster, o *natslock.Options) *natslock.Driver {
	t.Helper()
	js, err := jetstream.New(c.Conn(t))
	if err != nil {
		t.Fatal(err)
	}
	d, err := natslock.NewDriver(ctxTimeout(t, 30*time.Second), js, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

func drv(l *dlock.Locker) *natslock.Driver { return l.Driver().(*natslock.Driver) }

// admin returns the bucket through a connection of its own, for looking
// at and changing keys behind the drivers' backs.
func admin(t testing.TB, c *testenv.NATSCluster, bucket string) jetstream.KeyValue {
	t.Helper()
	js, err := jetstream.New(c.Conn(t))
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctxTimeout(t, 10*time.Second), bucket)
	if err != nil {
		t.Fatalf("bucket %q: %v", bucket, err)
	}
	return kv
}
