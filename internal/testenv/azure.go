package testenv

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
)

// The account of the servers StartAzure starts: Azurite's built-in
// development account, whose key Azurite publishes, and the container
// the tests lock in.
const (
	AzureAccount   = "devstoreaccount1"
	AzureKey       = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
	AzureContainer = "dlock"
)

// AzureServer is an Azurite blob service a test started on a free
// loopback port, with container AzureContainer. It is stopped when the
// test ends; Kill and Start restart it on the same directory.
type AzureServer struct {
	// Endpoint is the account's service URL,
	// http://127.0.0.1:port/devstoreaccount1.
	Endpoint string
	process
	stops int // how many times Stop stopped it
}

// StartAzure starts an Azurite blob service of the test's own. It fails
// t, naming ServicesScript, when azurite-blob is missing.
func StartAzure(t testing.TB) *AzureServer {
	t.Helper()
	bin, err := exec.LookPath("azurite-blob")
	if err != nil {
		t.Fatalf("azurite-blob not found (%v); install it with %s", err, ServicesScript)
	}
	dir := t.TempDir()
	port := strconv.Itoa(freePort(t))
	s := &AzureServer{Endpoint: "http://127.0.0.1:" + port + "/" + AzureAccount}
	s.t, s.what, s.logPath, s.timeout = t, "azurite 127.0.0.1:"+port, filepath.Join(t.TempDir(), "azurite.log"), 60*time.Second
	s.newCmd = func() *exec.Cmd {
		return exec.Command(bin, "--blobHost", "127.0.0.1", "--blobPort", port, "--location", dir, "--silent", "--skipApiVersionCheck", "--disableProductStyleUrl")
	}
	s.ready = func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := s.Client().CreateContainer(ctx, AzureContainer, nil)
		if bloberror.HasCode(err, bloberror.ContainerAlreadyExists) {
			return nil
		}
		return err
	}
	t.Cleanup(s.Kill)
	s.Start()
	return s
}

// Stop stops the server as an operator would: SIGTERM, upon which
// Azurite writes its blobs' metadata to disk (a killed Azurite forgets
// what it wrote since its last save), then, once it says it has closed,
// SIGKILL, for its process lingers.
func (s *AzureServer) Stop() {
	s.t.Helper()
	s.signal(syscall.SIGTERM)
	closed := func() bool {
		b, _ := os.ReadFile(s.logPath)
		return bytes.Count(b, []byte("successfully closed")) > s.stops
	}
	for deadline := time.Now().Add(30 * time.Second); !closed(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			s.t.Fatalf("%s did not close within 30s of SIGTERM", s.what)
		}
	}
	s.stops++
	s.Kill()
}

// ConnectionString is the connection string of the server's account.
func (s *AzureServer) ConnectionString() string {
	return "DefaultEndpointsProtocol=http;AccountName=" + AzureAccount + ";AccountKey=" + AzureKey + ";BlobEndpoint=" + s.Endpoint + ";"
}

// SetAzureEnv sets, in the test's environment, the account name and key
// of the servers StartAzure starts, for azblob:// URLs and the processes
// the test starts (t.Setenv: the test must not be parallel).
func SetAzureEnv(t *testing.T) {
	t.Setenv("AZURE_STORAGE_CONNECTION_STRING", "")
	t.Setenv("AZURE_STORAGE_ACCOUNT", AzureAccount)
	t.Setenv("AZURE_STORAGE_KEY", AzureKey)
}

// URL returns an azblob:// URL of the server's container under prefix.
func (s *AzureServer) URL(prefix string) string {
	return "azblob://" + AzureContainer + "/" + prefix + "?endpoint=" + s.Endpoint
}

// Client returns a client of the server's account.
func (s *AzureServer) Client() *azblob.Client {
	c, err := azblob.NewClientFromConnectionString(s.ConnectionString(), nil)
	if err != nil {
		panic(errors.Join(errors.New("testenv: Azurite connection string"), err))
	}
	return c
}
