package azurelock_test

import (
	"context"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/azurelock"
	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/locktest"
)

// objectStore is the shared object-store checks' view of srv's container.
func objectStore(srv *testenv.AzureServer) locktest.ObjectStore {
	return locktest.ObjectStore{
		NewLocker: func(t testing.TB, prefix string, opts ...dlock.Option) *dlock.Locker {
			t.Helper()
			l, err := azurelock.New(context.Background(), srv.Client(), testenv.AzureContainer, &azurelock.Options{Prefix: prefix}, opts...)
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
			if _, err := srv.Client().DeleteBlob(ctx, testenv.AzureContainer, key, nil); err != nil {
				t.Fatal(err)
			}
		},
		Read: func(t testing.TB, key string) ([]byte, bool) {
			t.Helper()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			out, err := srv.Client().DownloadStream(ctx, testenv.AzureContainer, key, nil)
			if bloberror.HasCode(err, bloberror.BlobNotFound) {
				return nil, false
			}
			if err != nil {
				t.Fatal(err)
			}
			return locktest.ReadAll(t, out.Body), true
		},
	}
}

func TestConformance(t *testing.T) { objectStore(testenv.StartAzure(t)).Conformance(t) }

// TestDiagnose: dlock doctor's checks pass the store (see also
// TestProbeRefusesIgnoredConditions, which fails a careless one).
func TestDiagnose(t *testing.T) { objectStore(testenv.StartAzure(t)).Diagnose(t) }

// TestServerRestart: a lock held while the store restarts (on the same
// directory) is still held afterwards. Azurite is stopped, not killed: it
// keeps its blobs' metadata in memory and writes it to disk at exit, so a
// killed Azurite forgets blobs that Azure itself would have kept.
func TestServerRestart(t *testing.T) {
	srv := testenv.StartAzure(t)
	objectStore(srv).Restart(t, func() { srv.Stop(); srv.Start() })
}

// The benchmarks run against one Azurite of their own (on the test's
// temporary directory); see locktest.ObjectStore.

func BenchmarkAcquireRelease(b *testing.B) { objectStore(testenv.StartAzure(b)).BenchAcquireRelease(b) }

func BenchmarkContended8(b *testing.B) { objectStore(testenv.StartAzure(b)).BenchContended8(b) }
