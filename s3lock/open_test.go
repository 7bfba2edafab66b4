package s3lock_test

import (
	"crypto/md5"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/locktest"
	"github.com/dlockgo/dlock/s3lock"
)

// TestOpenURL: an s3:// URL opens a Locker that locks, and each mistake
// in one is an error naming the parameter.
func TestOpenURL(t *testing.T) {
	srv := testenv.StartS3(t)
	testenv.SetS3Env(t)
	ctx := locktest.Context(t, 30*time.Second)
	l, err := dlock.Open(ctx, srv.URL(testPrefix()), dlock.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	lease, err := l.TryAcquire(ctx, "open/url")
	if err != nil {
		t.Fatal(err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	base := "s3://" + testenv.S3Bucket + "/p?endpoint=" + srv.Endpoint
	for _, c := range []struct{ url, param string }{
		{"s3:///p", "bucket"},
		{"s3://user:secret@b/p", "user"},
		{base + "&path_style=maybe", "path_style"},
		{base + "&probe=perhaps", "probe"},
		{"s3://b/p?endpoint=127.0.0.1:1", "endpoint"},
		{base + "&colour=blue", "colour"},
	} {
		locktest.OpenFails(t, ctx, c.url, c.param)
	}
}

// TestProbeRefusesIgnoredConditions: a store that accepts a write whose
// condition fails (here a small S3 double that ignores If-None-Match and
// If-Match) is refused at NewDriver, with an error that says so, and
// accepted with NoProbe.
func TestProbeRefusesIgnoredConditions(t *testing.T) {
	var mu sync.Mutex
	objects := map[string][]byte{}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		w.Header().Set("Date", time.Now().UTC().Format(http.TimeFormat))
		switch r.Method {
		case http.MethodPut:
			b, _ := io.ReadAll(r.Body)
			objects[r.URL.Path] = b
			sum := md5.Sum(b)
			w.Header().Set("ETag", `"`+hex.EncodeToString(sum[:])+`"`)
		case http.MethodDelete:
			delete(objects, r.URL.Path)
			w.WriteHeader(http.StatusNoContent)
		default:
			w.WriteHeader(http.StatusNotImplemented)
		}
	})
	ts := httptest.NewServer(h)
	defer ts.Close()
	client := s3.New(s3.Options{Region: "us-east-1", BaseEndpoint: aws.String(ts.URL), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider("a", "b", "")})
	ctx := locktest.Context(t, 30*time.Second)
	_, err := s3lock.NewDriver(ctx, client, "b", nil)
	if err == nil || !strings.Contains(err.Error(), "ignores If-None-Match") {
		t.Fatalf("NewDriver on a store that ignores conditions = %v, want a refusal naming If-None-Match", err)
	}
	d, err := s3lock.NewDriver(ctx, client, "b", &s3lock.Options{NoProbe: true})
	if err != nil {
		t.Fatalf("NewDriver with NoProbe: %v", err)
	}
	_ = d.Close()
	if len(objects) != 0 {
		t.Errorf("the probe left %d objects", len(objects))
	}
}

// TestServerRestart: a lock held while the store restarts (on the same
// directory) is still held afterwards: its holder renews it, and another
// client cannot take it.
func TestServerRestart(t *testing.T) {
	srv := testenv.StartS3(t)
	prefix := testPrefix()
	ctx := locktest.Context(t, 60*time.Second)
	a := newLocker(t, srv, prefix, dlock.WithTTL(10*time.Second))
	b := newLocker(t, srv, prefix, dlock.WithTTL(10*time.Second))
	lease, err := a.Acquire(ctx, "restart")
	if err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	srv.Start()
	if err := lease.Renew(ctx); err != nil {
		t.Fatalf("Renew after the restart: %v", err)
	}
	if _, err := b.TryAcquire(ctx, "restart"); err == nil {
		t.Fatal("another client took the lock after the restart")
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	next, err := b.TryAcquire(ctx, "restart")
	if err != nil {
		t.Fatal(err)
	}
	if next.Token() <= lease.Token() {
		t.Errorf("token after the restart %d, want above %d", next.Token(), lease.Token())
	}
}
