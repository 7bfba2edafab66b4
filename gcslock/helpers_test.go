package gcslock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"cloud.google.com/go/storage"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/gcslock"
	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/locktest"
)

// objectStore is the shared object-store checks' view of srv's bucket.
func objectStore(srv *testenv.GCSServer) locktest.ObjectStore {
	return locktest.ObjectStore{
		NewLocker: func(t testing.TB, prefix string, opts ...dlock.Option) *dlock.Locker {
			t.Helper()
			c := srv.Client()
			l, err := gcslock.New(context.Background(), c, testenv.GCSBucket, &gcslock.Options{Prefix: prefix}, opts...)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = l.Close(); _ = c.Close() })
			return l
		},
		Delete: func(t testing.TB, key string) {
			t.Helper()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c := srv.Client()
			defer c.Close()
			if err := c.Bucket(testenv.GCSBucket).Object(key).Delete(ctx); err != nil {
				t.Fatal(err)
			}
		},
		Read: func(t testing.TB, key string) ([]byte, bool) {
			t.Helper()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c := srv.Client()
			defer c.Close()
			r, err := c.Bucket(testenv.GCSBucket).Object(key).NewReader(ctx)
			if errors.Is(err, storage.ErrObjectNotExist) {
				return nil, false
			}
			if err != nil {
				t.Fatal(err)
			}
			return locktest.ReadAll(t, r), true
		},
	}
}

func TestConformance(t *testing.T) { objectStore(testenv.StartGCS(t)).Conformance(t) }

// TestDiagnose: dlock doctor's checks pass the store (see also
// TestProbeRefusesIgnoredConditions, which fails a careless one).
func TestDiagnose(t *testing.T) { objectStore(testenv.StartGCS(t)).Diagnose(t) }

// TestServerRestart: a lock held while the store restarts (on the same
// directory) is still held afterwards.
func TestServerRestart(t *testing.T) {
	srv := testenv.StartGCS(t)
	objectStore(srv).Restart(t, func() { srv.Kill(); srv.Start() })
}

// The benchmarks run against one fake-gcs-server of their own (filesystem
// backend on the test's temporary directory); see locktest.ObjectStore.

func BenchmarkAcquireRelease(b *testing.B) { objectStore(testenv.StartGCS(b)).BenchAcquireRelease(b) }

func BenchmarkContended8(b *testing.B) { objectStore(testenv.StartGCS(b)).BenchContended8(b) }
