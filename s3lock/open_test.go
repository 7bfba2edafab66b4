package s3lock_test

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/dlockgo/dlock/driver"
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
	locktest.OpenLocks(t, ctx, srv.URL(locktest.ObjectPrefix()))
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
// condition fails (a small S3 double that ignores If-None-Match and
// If-Match) is refused at NewDriver, with an error that says so, and
// accepted with NoProbe.
func TestProbeRefusesIgnoredConditions(t *testing.T) {
	url, held := locktest.CarelessStore(t, func(r *http.Request) string { return r.URL.Path },
		func(w http.ResponseWriter, r *http.Request, n int) {
			switch r.Method {
			case http.MethodPut:
				w.Header().Set("ETag", `"`+strconv.Itoa(n)+`"`)
			case http.MethodDelete:
				w.WriteHeader(http.StatusNoContent)
			case http.MethodGet, http.MethodHead: // Diagnose reads a missing object
				w.WriteHeader(http.StatusNotFound)
			default:
				w.WriteHeader(http.StatusNotImplemented)
			}
		})
	client := s3.New(s3.Options{Region: "us-east-1", BaseEndpoint: aws.String(url), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider("a", "b", "")})
	locktest.ProbeRefuses(t, func(ctx context.Context, probe bool) (driver.Driver, error) {
		return s3lock.NewDriver(ctx, client, "b", &s3lock.Options{NoProbe: !probe})
	}, held)
}
