package s3lock_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/locktest"
	"github.com/dlockgo/dlock/s3lock"
)

// newLocker returns a Locker on srv's bucket under prefix, closed when t
// ends.
func newLocker(t testing.TB, srv *testenv.S3Server, prefix string, opts ...dlock.Option) *dlock.Locker {
	t.Helper()
	l, err := s3lock.New(context.Background(), srv.Client(), testenv.S3Bucket, &s3lock.Options{Prefix: prefix}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// deleteLock deletes the object of the mutex called name, as an operator
// would.
func deleteLock(t testing.TB, srv *testenv.S3Server, prefix, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	key := prefix + "mutex/" + strings.ReplaceAll(name, "/", "%2F")
	if _, err := srv.Client().DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(testenv.S3Bucket), Key: &key}); err != nil {
		t.Fatal(err)
	}
}

func testPrefix() string { return "t" + locktest.RandomHex(4) + "/" }
