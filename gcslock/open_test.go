package gcslock_test

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/api/option"

	"cloud.google.com/go/storage"

	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/gcslock"
	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/locktest"
)

// TestOpenURL: a gs:// URL opens a Locker that locks, on the server
// STORAGE_EMULATOR_HOST names, and each mistake in one is an error
// naming the parameter.
func TestOpenURL(t *testing.T) {
	srv := testenv.StartGCS(t)
	srv.SetEnv(t)
	ctx := locktest.Context(t, 30*time.Second)
	locktest.OpenLocks(t, ctx, srv.URL(locktest.ObjectPrefix()))
	for _, c := range []struct{ url, param string }{
		{"gs:///p", "bucket"},
		{"gs://user:secret@b/p", "user"},
		{"gs://" + testenv.GCSBucket + "/p?probe=perhaps", "probe"},
		{"gs://b/p?endpoint=127.0.0.1:1", "endpoint"},
		{"gs://" + testenv.GCSBucket + "/p?colour=blue", "colour"},
	} {
		locktest.OpenFails(t, ctx, c.url, c.param)
	}
}

// TestProbeRefusesIgnoredConditions: a store that accepts a write whose
// condition fails (a small JSON API double that ignores ifGenerationMatch)
// is refused at NewDriver, with an error that says so, and accepted with
// NoProbe.
func TestProbeRefusesIgnoredConditions(t *testing.T) {
	key := func(r *http.Request) string { // the object's name
		if r.Method == http.MethodDelete {
			return strings.TrimPrefix(r.URL.Path, "/storage/v1/b/b/o/")
		}
		return r.URL.Query().Get("name")
	}
	url, held := locktest.CarelessStore(t, key, func(w http.ResponseWriter, r *http.Request, n int) {
		switch r.Method {
		case http.MethodPost:
			w.Header().Set("Content-Type", "application/json")
			// The probe writes "{}", whose checksum the client checks.
			sum := binary.BigEndian.AppendUint32(nil, crc32.Checksum([]byte("{}"), crc32.MakeTable(crc32.Castagnoli)))
			fmt.Fprintf(w, `{"bucket":"b","name":"x","generation":"%d","metageneration":"1","updated":%q,"crc32c":%q}`,
				n, time.Now().UTC().Format(time.RFC3339Nano), base64.StdEncoding.EncodeToString(sum))
		case http.MethodDelete:
			w.WriteHeader(http.StatusNoContent)
		case http.MethodGet, http.MethodHead: // Diagnose reads a missing object
			w.WriteHeader(http.StatusNotFound)
		default:
			w.WriteHeader(http.StatusNotImplemented)
		}
	})
	client, err := storage.NewClient(context.Background(), option.WithEndpoint(url+"/storage/v1/"), option.WithoutAuthentication())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	locktest.ProbeRefuses(t, func(ctx context.Context, probe bool) (driver.Driver, error) {
		return gcslock.NewDriver(ctx, client, "b", &gcslock.Options{NoProbe: !probe})
	}, held)
}
