package testenv

import (
	"context"
	"errors"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"cloud.google.com/go/storage"
	"google.golang.org/api/googleapi"
	"google.golang.org/api/option"
)

// GCSBucket is the bucket of the servers StartGCS starts.
const GCSBucket = "dlock"

// GCSServer is a fake-gcs-server (a Google Cloud Storage emulator) a test
// started on a free loopback port, with bucket GCSBucket, storing on the
// test's temporary directory. It is stopped when the test ends; Kill and
// Start restart it on the same directory.
type GCSServer struct {
	// Host is the server's address, 127.0.0.1:port, as
	// STORAGE_EMULATOR_HOST takes it.
	Host string
	process
}

// StartGCS starts a fake-gcs-server of the test's own. It fails t, naming
// ServicesScript, when the binary is missing.
func StartGCS(t testing.TB) *GCSServer {
	t.Helper()
	bin, err := exec.LookPath("fake-gcs-server")
	if err != nil {
		t.Fatalf("fake-gcs-server not found (%v); install it with %s", err, ServicesScript)
	}
	dir := t.TempDir()
	port := strconv.Itoa(freePort(t))
	s := &GCSServer{Host: "127.0.0.1:" + port}
	s.t, s.what, s.logPath, s.timeout = t, "fake-gcs-server "+s.Host, filepath.Join(t.TempDir(), "fake-gcs-server.log"), 30*time.Second
	s.newCmd = func() *exec.Cmd {
		return exec.Command(bin, "-scheme", "http", "-host", "127.0.0.1", "-port", port, "-public-host", s.Host,
			"-external-url", "http://"+s.Host, "-backend", "filesystem", "-filesystem-root", dir, "-log-level", "error")
	}
	s.ready = func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		c := s.Client()
		defer c.Close()
		err := c.Bucket(GCSBucket).Create(ctx, "dlock-test", nil)
		var ge *googleapi.Error
		if errors.As(err, &ge) && ge.Code == http.StatusConflict {
			return nil
		}
		return err
	}
	t.Cleanup(s.Kill)
	s.Start()
	return s
}

// SetEnv sets STORAGE_EMULATOR_HOST to the server in the test's
// environment, for gs:// URLs and the processes the test starts
// (t.Setenv: the test must not be parallel).
func (s *GCSServer) SetEnv(t *testing.T) {
	t.Setenv("STORAGE_EMULATOR_HOST", s.Host)
}

// URL returns a gs:// URL of the server's bucket under prefix, for a
// process whose environment names the server (SetEnv).
func (s *GCSServer) URL(prefix string) string {
	return "gs://" + GCSBucket + "/" + prefix
}

// Client returns a client of the server, which the caller closes.
func (s *GCSServer) Client() *storage.Client {
	c, err := storage.NewClient(context.Background(), option.WithEndpoint("http://"+s.Host+"/storage/v1/"), option.WithoutAuthentication())
	if err != nil {
		panic(errors.Join(errors.New("testenv: fake-gcs-server client"), err))
	}
	return c
}
