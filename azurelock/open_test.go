package azurelock_test

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/azurelock"
	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/locktest"
)

// TestOpenURL: an azblob:// URL opens a Locker that locks, with the
// account key or the connection string from the environment, and each
// mistake in one is an error naming the parameter.
func TestOpenURL(t *testing.T) {
	srv := testenv.StartAzure(t)
	ctx := locktest.Context(t, 60*time.Second)
	t.Run("account-key", func(t *testing.T) {
		testenv.SetAzureEnv(t)
		locktest.OpenLocks(t, ctx, srv.URL(locktest.ObjectPrefix()))
		base := "azblob://" + testenv.AzureContainer + "/p?endpoint=" + srv.Endpoint
		for _, c := range []struct{ url, param string }{
			{"azblob:///p", "container"},
			{"azblob://user:secret@c/p", "user"},
			{base + "&probe=perhaps", "probe"},
			{"azblob://c/p?endpoint=127.0.0.1:1", "endpoint"},
			{base + "&colour=blue", "colour"},
		} {
			locktest.OpenFails(t, ctx, c.url, c.param)
		}
	})
	t.Run("connection-string", func(t *testing.T) {
		t.Setenv("AZURE_STORAGE_ACCOUNT", "")
		t.Setenv("AZURE_STORAGE_KEY", "")
		t.Setenv("AZURE_STORAGE_CONNECTION_STRING", srv.ConnectionString())
		locktest.OpenLocks(t, ctx, "azblob://"+testenv.AzureContainer+"/"+locktest.ObjectPrefix())
		locktest.OpenFails(t, ctx, srv.URL(locktest.ObjectPrefix()), "endpoint")
	})
	t.Run("no-credentials", func(t *testing.T) {
		t.Setenv("AZURE_STORAGE_ACCOUNT", "")
		t.Setenv("AZURE_STORAGE_KEY", "")
		t.Setenv("AZURE_STORAGE_CONNECTION_STRING", "")
		_, err := dlock.Open(ctx, srv.URL(locktest.ObjectPrefix()))
		if err == nil || !strings.Contains(err.Error(), "AZURE_STORAGE_KEY") {
			t.Fatalf("Open without credentials = %v, want an error naming AZURE_STORAGE_KEY", err)
		}
	})
}

// TestProbeRefusesIgnoredConditions: a store that accepts a write whose
// condition fails (a small Blob service double that ignores If-None-Match
// and If-Match) is refused at NewDriver, with an error that says so, and
// accepted with NoProbe.
func TestProbeRefusesIgnoredConditions(t *testing.T) {
	url, held := locktest.CarelessStore(t, func(r *http.Request) string { return r.URL.Path },
		func(w http.ResponseWriter, r *http.Request, n int) {
			switch r.Method {
			case http.MethodPut:
				w.Header().Set("ETag", `"0x`+strconv.Itoa(n)+`"`)
				w.Header().Set("Last-Modified", w.Header().Get("Date"))
				w.WriteHeader(http.StatusCreated)
			case http.MethodDelete:
				w.WriteHeader(http.StatusAccepted)
			case http.MethodGet, http.MethodHead: // Diagnose reads a missing object
				w.WriteHeader(http.StatusNotFound)
			default:
				w.WriteHeader(http.StatusNotImplemented)
			}
		})
	client, err := azblob.NewClientWithNoCredential(url+"/acct", nil)
	if err != nil {
		t.Fatal(err)
	}
	locktest.ProbeRefuses(t, func(ctx context.Context, probe bool) (driver.Driver, error) {
		return azurelock.NewDriver(ctx, client, "c", &azurelock.Options{NoProbe: !probe})
	}, held)
}
