package testenv

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// S3 credentials of the gateways StartS3 starts: the root user's.
const (
	S3Access = "dlocktest"
	S3Secret = "dlocktest-secret"
	S3Bucket = "dlock"
	s3Region = "us-east-1"
)

// S3Server is a versitygw process (an S3 gateway over a directory) a
// test started on a free loopback port, with bucket S3Bucket. It is
// stopped when the test ends; Kill and Start restart it on the same
// directory.
type S3Server struct {
	// Endpoint is the server's URL, http://127.0.0.1:port.
	Endpoint string
	process
}

// StartS3 starts a versitygw of the test's own. It fails t, naming
// ServicesScript, when the binary is missing.
func StartS3(t testing.TB) *S3Server {
	t.Helper()
	bin, err := exec.LookPath("versitygw")
	if err != nil {
		t.Fatalf("versitygw not found (%v); install it with %s", err, ServicesScript)
	}
	dir := t.TempDir()
	must(t, os.Mkdir(filepath.Join(dir, S3Bucket), 0o755))
	addr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	s := &S3Server{Endpoint: "http://" + addr}
	s.t, s.what, s.logPath, s.timeout = t, "versitygw "+addr, filepath.Join(t.TempDir(), "versitygw.log"), 30*time.Second
	s.newCmd = func() *exec.Cmd {
		return exec.Command(bin, "--port", addr, "--access", S3Access, "--secret", S3Secret, "--quiet", "posix", dir)
	}
	s.ready = func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := s.Client().HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(S3Bucket)})
		return err
	}
	t.Cleanup(s.Kill)
	s.Start()
	return s
}

// SetS3Env sets, in the test's environment, the credentials and region
// of the servers StartS3 starts, for an AWS SDK and the processes the
// test starts (t.Setenv: the test must not be parallel).
func SetS3Env(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", S3Access)
	t.Setenv("AWS_SECRET_ACCESS_KEY", S3Secret)
	t.Setenv("AWS_REGION", s3Region)
	t.Setenv("AWS_CONFIG_FILE", os.DevNull)
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", os.DevNull)
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true") // never ask the network for a role
}

// URL returns an s3:// URL of the server's bucket under prefix.
func (s *S3Server) URL(prefix string) string {
	return "s3://" + S3Bucket + "/" + prefix + "?path_style=true&endpoint=" + s.Endpoint
}

// Client returns a client of the server with its root credentials.
func (s *S3Server) Client() *s3.Client {
	return s3.New(s3.Options{
		Region:       s3Region,
		BaseEndpoint: aws.String(s.Endpoint),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(S3Access, S3Secret, ""),
		HTTPClient:   &http.Client{Timeout: 10 * time.Second},
	})
}
