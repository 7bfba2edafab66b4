package natslock_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/natslock"
)

// randomBucket keeps tests apart on one server.
func randomBucket() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "test-" + hex.EncodeToString(b[:])
}

func ctxTimeout(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// newLocker returns a Locker on a connection of its own, as another
// process would have; both are closed when t ends.
func newLocker(t testing.TB, c *testenv.NATSCluster, o *natslock.Options, opts ...dlock.Option) *dlock.Locker {
	t.Helper()
	l, err := natslock.NewConn(ctxTimeout(t, 30*time.Second), c.Conn(t), o, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
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

// request is a driver request for the mutex name with a fresh owner.
func request(name string, ttl time.Duration) driver.Request {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return driver.Request{Name: name, Owner: hex.EncodeToString(b[:]), TTL: ttl}
}
