package natslock_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/locktest"
	"github.com/dlockgo/dlock/natslock"
)

func TestOpen(t *testing.T) {
	c := testenv.StartNATS(t, 1)
	ctx := ctxTimeout(t, 30*time.Second)
	bucket := randomBucket()
	l, err := dlock.Open(ctx, "nats://"+c.URL()+"/"+bucket+
		"?ttl=3s&replicas=1&storage=file&marker_ttl=5s&request_timeout=1s&dial_timeout=2s&client_name=dlock-test")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	d := drv(l)
	if d.Scheme() != "nats" || d.Bucket() != bucket {
		t.Errorf("Scheme, Bucket = %q, %q; want nats, %s", d.Scheme(), d.Bucket(), bucket)
	}
	st, err := d.KeyValue().Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.LimitMarkerTTL() != 5*time.Second || st.BackingStore() != "JetStream" {
		t.Errorf("bucket status: marker TTL %v, store %s; want 5s, JetStream", st.LimitMarkerTTL(), st.BackingStore())
	}
	lease, err := l.Acquire(ctx, "jobs/nightly:1")
	if err != nil {
		t.Fatal(err)
	}
	if lease.TTL() != 3*time.Second {
		t.Errorf("TTL from the URL = %v, want 3s", lease.TTL())
	}
	e, err := admin(t, c, bucket).Get(ctx, "mutex.jobs/nightly=3A1")
	if err != nil {
		t.Fatal(err)
	}
	if want := lease.Owner() + " 0 3s"; string(e.Value()) != want || e.Revision() != lease.Token() {
		t.Errorf("the lock's key holds %q at revision %d, want %q at %d", e.Value(), e.Revision(), want, lease.Token())
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := admin(t, c, bucket).Get(ctx, "mutex.jobs/nightly=3A1"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("the key after Release: %v, want ErrKeyNotFound (purged)", err)
	}
	if err := l.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if _, err := d.KeyValue().Status(ctx); err == nil {
		t.Error("the connection a URL opened still works after Close; Close must close it")
	}

	// A driver over a connection of the caller's leaves it open.
	nc := c.Conn(t)
	l2, err := natslock.NewConn(ctx, nc, &natslock.Options{Bucket: bucket})
	if err != nil {
		t.Fatal(err)
	}
	_ = l2.Close()
	if nc.IsClosed() {
		t.Error("the caller's connection is closed after Close; Close must not close it")
	}
}

// TestBucketWithoutTTL: a bucket made without per-key TTLs is refused
// with an error that says how to make one, and replicas beyond a single
// server's reach fail Open.
func TestBucketWithoutTTL(t *testing.T) {
	c := testenv.StartNATS(t, 1)
	ctx := ctxTimeout(t, 30*time.Second)
	js := jetStream(t, c)
	bucket := randomBucket()
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bucket}); err != nil {
		t.Fatal(err)
	}
	_, err := natslock.NewDriver(ctx, js, &natslock.Options{Bucket: bucket})
	if err == nil || !strings.Contains(err.Error(), "no per-key TTL") || !strings.Contains(err.Error(), "LimitMarkerTTL") {
		t.Errorf("NewDriver on a bucket without per-key TTL = %v, want an error saying so and how to fix it", err)
	}
	if _, err := dlock.Open(ctx, "nats://"+c.URL()+"/"+randomBucket()+"?replicas=3"); err == nil {
		t.Error("Open with replicas=3 on one server succeeded")
	}
}

func TestURLErrors(t *testing.T) {
	c := testenv.StartNATS(t, 1)
	ctx := ctxTimeout(t, 30*time.Second)
	dir := t.TempDir()
	junk := filepath.Join(dir, "junk")
	if err := os.WriteFile(junk, []byte("not a seed"), 0o600); err != nil {
		t.Fatal(err)
	}
	h := c.URL()
	for _, bad := range []struct{ url, param string }{
		{"nats://" + h + "?colour=red", "colour"},
		{"nats:///dlock", "host"},
		{"nats://" + h + ",," + h, "host"},
		{"nats://" + h + "," + h, "host"},
		{"nats://127.0.0.1:99999", "host"},
		{"nats://" + h + "/a.b", "bucket"},
		{"nats://" + h + "/a/b", "bucket"},
		{"nats://" + h + "?replicas=0", "replicas"},
		{"nats://" + h + "?replicas=three", "replicas"},
		{"nats://" + h + "?storage=disk", "storage"},
		{"nats://" + h + "?marker_ttl=500ms", "marker_ttl"},
		{"nats://" + h + "?marker_ttl=soon", "marker_ttl"},
		{"nats://" + h + "?request_timeout=0s", "request_timeout"},
		{"nats://" + h + "?create=maybe", "create"},
		{"nats://" + h + "?dial_timeout=0s", "dial_timeout"},
		{"nats://" + h + "?ttl=1ms", "ttl"},
		{"nats://:secret@" + h, "userinfo"},
		{"nats://secret@" + h, "userinfo"},
		{"nats://" + h + "?token=secret&creds=" + junk, "creds"},
		{"nats://" + h + "?cacert=/etc/ca.pem", "cacert"},
		{"nats://" + h + "?tls=true&cacert=/nonexistent/ca.pem", "cacert"},
		{"nats://" + h + "?tls=true&cert=" + junk, "cert"},
		{"nats://" + h + "?creds=/nonexistent/user.creds", "creds"},
		{"nats://" + h + "?nkey=/nonexistent/user.nk", "nkey"},
		{"nats://" + h + "?nkey=" + junk, "nkey"},
		{"nats://locks:pw@" + h + "?creds=" + junk, "creds"},
	} {
		if err := locktest.OpenFails(t, ctx, bad.url, bad.param); err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("Open(%q): the error %q shows the password", bad.url, err)
		}
	}
	// create=false opens an existing bucket, and refuses a missing one
	// rather than creating it.
	missing := "nats://" + h + "/nope" + locktest.RandomHex(4) + "?create=false"
	if _, err := dlock.Open(ctx, missing); !errors.Is(err, jetstream.ErrBucketNotFound) {
		t.Errorf("Open(%q) = %v, want an error matching jetstream.ErrBucketNotFound", missing, err)
	}
	l := locktest.Opened(t)(dlock.Open(ctx, "nats://"+h+"/made"))
	_ = l.Close()
	l = locktest.Opened(t)(dlock.Open(ctx, "nats://"+h+"/made?create=false"))
	_ = l.Close()
	if _, err := dlock.Open(ctx, fmt.Sprintf("nats://u:secret@127.0.0.1:%d?dial_timeout=200ms", 1)); err == nil ||
		strings.Contains(err.Error(), "secret") {
		t.Errorf("Open of a closed port = %v, want an error without the password", err)
	}
}
