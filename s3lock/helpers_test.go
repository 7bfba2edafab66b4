package s3lock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/locktest"
	"github.com/dlockgo/dlock/s3lock"
)

// objectStore is the shared object-store checks' view of srv's bucket.
func objectStore(srv *testenv.S3Server) locktest.ObjectStore {
	return locktest.ObjectStore{
		NewLocker: func(t testing.TB, prefix string, opts ...dlock.Option) *dlock.Locker {
			t.Helper()
			l, err := s3lock.New(context.Background(), srv.Client(), testenv.S3Bucket, &s3lock.Options{Prefix: prefix}, opts...)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = l.Close() })
			return l
		},
		Delete: func(t testing.TB, key string) {
			t.Helper()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, err := srv.Client().DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(testenv.S3Bucket), Key: &key}); err != nil {
				t.Fatal(err)
			}
		},
		Read: func(t testing.TB, key string) ([]byte, bool) {
			t.Helper()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			out, err := srv.Client().GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(testenv.S3Bucket), Key: &key})
			if _, missing := errors.AsType[*types.NoSuchKey](err); missing {
				return nil, false
			}
			if err != nil {
				t.Fatal(err)
			}
			return locktest.ReadAll(t, out.Body), true
		},
	}
}

func TestConformance(t *testing.T) { objectStore(testenv.StartS3(t)).Conformance(t) }

// TestDiagnose: dlock doctor's checks pass the store (see also
// TestProbeRefusesIgnoredConditions, which fails a careless one).
func TestDiagnose(t *testing.T) { objectStore(testenv.StartS3(t)).Diagnose(t) }

// TestServerRestart: a lock held while the store restarts (on the same
// directory) is still held afterwards.
func TestServerRestart(t *testing.T) {
	srv := testenv.StartS3(t)
	objectStore(srv).Restart(t, func() { srv.Kill(); srv.Start() })
}

// The benchmarks run against one versitygw of their own (POSIX backend
// on the test's temporary directory); see locktest.ObjectStore.

func BenchmarkAcquireRelease(b *testing.B) { objectStore(testenv.StartS3(b)).BenchAcquireRelease(b) }

func BenchmarkContended8(b *testing.B) { objectStore(testenv.StartS3(b)).BenchContended8(b) }
