package natslock_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/locktest"
	"github.com/dlockgo/dlock/natslock"
)

// TestDiagnose: Diagnose on servers and buckets set up well and wrong on
// purpose (dlock doctor's checks): a file bucket that has held a lock, on
// one server and R3 on a 3-server cluster, fails nothing and passes every
// check but sync_interval, which no client can read; an R1 bucket on the
// cluster, a memory bucket, a bucket never written to and an account
// whose JetStream store is nearly full warn. Every run leaves its key
// purged.
func TestDiagnose(t *testing.T) {
	const ttl = 10 * time.Second
	t.Run("one server", func(t *testing.T) {
		c := testenv.StartNATS(t, 1)
		t.Run("file bucket in use", func(t *testing.T) {
			o := &natslock.Options{Bucket: randomBucket()}
			use(t, c, o)
			fs := diagnose(t, c, o, ttl)
			locktest.NoFail(t, fs)
			locktest.WantFinding(t, fs, "round trip", driver.OK, "TTL 10s")
			locktest.WantFinding(t, fs, "clock", driver.OK, "by the bucket stream's leader n0")
			locktest.WantFinding(t, fs, "server version", driver.OK, "nats-server 2.")
			locktest.WantFinding(t, fs, "jetstream", driver.OK, "enabled for this account; file store")
			locktest.WantFinding(t, fs, "bucket", driver.OK, "writes so far")
			locktest.WantFinding(t, fs, "replicas", driver.OK, "R1 on a single server")
			locktest.WantFinding(t, fs, "storage", driver.OK, "file")
			locktest.WantFinding(t, fs, "sync_interval", driver.Warn, "not readable by a client")
		})
		t.Run("memory bucket", func(t *testing.T) {
			o := &natslock.Options{Bucket: randomBucket(), Storage: jetstream.MemoryStorage}
			use(t, c, o)
			fs := diagnose(t, c, o, ttl)
			locktest.NoFail(t, fs)
			locktest.WantFinding(t, fs, "storage", driver.Warn, "memory")
		})
		t.Run("bucket never written", func(t *testing.T) {
			o := &natslock.Options{Bucket: randomBucket()}
			fs := diagnose(t, c, o, ttl) // opening creates it
			locktest.WantFinding(t, fs, "bucket", driver.Warn, o.Bucket+" has never been written to")
		})
	})
	t.Run("cluster", func(t *testing.T) {
		c := testenv.StartNATS(t, 3)
		for _, tc := range []struct {
			replicas int
			want     driver.Severity
			found    string
		}{
			{3, driver.OK, "R3 on "},
			{1, driver.Warn, "alone, of cluster dlock-test (3 servers known to this client)"},
		} {
			t.Run(fmt.Sprintf("R%d", tc.replicas), func(t *testing.T) {
				o := &natslock.Options{Bucket: randomBucket(), Replicas: tc.replicas}
				use(t, c, o)
				fs := diagnose(t, c, o, ttl)
				locktest.NoFail(t, fs)
				locktest.WantFinding(t, fs, "replicas", tc.want, tc.found)
			})
		}
	})
	t.Run("account store nearly full", func(t *testing.T) {
		c := testenv.StartNATSWith(t, 1, testenv.NATSOptions{
			Config: "accounts {\n  locks: { jetstream: { max_file: 1MB, max_mem: 1MB }, users: [{user: locks, password: locks}] }\n}",
			User:   "locks", Password: "locks",
		})
		o := &natslock.Options{Bucket: randomBucket()}
		use(t, c, o)
		// Another stream of the account takes 92% of its 1 MiB.
		js := jetStream(t, c)
		ctx := ctxTimeout(t, 30*time.Second)
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "fill", Subjects: []string{"fill"}}); err != nil {
			t.Fatal(err)
		}
		for range 10 {
			if _, err := js.Publish(ctx, "fill", make([]byte, 96_000)); err != nil {
				t.Fatal(err)
			}
		}
		fs := diagnose(t, c, o, ttl)
		locktest.WantFinding(t, fs, "jetstream", driver.Warn, "of 1048576 bytes (9")
	})
}

// use opens o's bucket (creating it) and takes and releases a lock in it.
func use(t *testing.T, c *testenv.NATSCluster, o *natslock.Options) {
	t.Helper()
	l := newLocker(t, c, o)
	ctx := ctxTimeout(t, 10*time.Second)
	lease, err := l.TryAcquire(ctx, "doctor-test")
	if err != nil {
		t.Fatal(err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// diagnose runs Diagnose on a driver of o's bucket, logs the findings,
// and checks that the run's key is gone: it has one message left, its
// purge marker, which expires after the marker TTL.
func diagnose(t *testing.T, c *testenv.NATSCluster, o *natslock.Options, ttl time.Duration) []driver.Finding {
	t.Helper()
	fs := locktest.Diagnose(t, newDriver(t, c, o), ttl)
	for _, f := range fs {
		t.Logf("%-4s %s: %s", f.Severity, f.Check, f.Found)
	}
	ctx := ctxTimeout(t, 10*time.Second)
	kv := admin(t, c, o.Bucket)
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for k := range keys.Keys() {
		if strings.HasPrefix(k, "doctor.") {
			t.Errorf("the doctor key %s is left in bucket %s", k, o.Bucket)
		}
	}
	s, err := jetStream(t, c).Stream(ctx, "KV_"+o.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	prefix := "$KV." + o.Bucket + ".doctor."
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(prefix+">"))
	if err != nil {
		t.Fatal(err)
	}
	if len(info.State.Subjects) != 1 {
		t.Errorf("doctor subjects in the stream after one run: %v, want one", info.State.Subjects)
	}
	for subject, n := range info.State.Subjects {
		m, err := s.GetLastMsgForSubject(ctx, subject)
		if err != nil {
			t.Fatal(err)
		}
		if n != 1 || m.Header.Get("KV-Operation") != "PURGE" || m.Header.Get(jetstream.MsgTTLHeader) == "" {
			t.Errorf("%s: %d messages, the last with headers %v; want its purge marker alone, with a TTL", subject, n, m.Header)
		}
	}
	return fs
}
