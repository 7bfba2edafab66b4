package natslock_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/locktest"
	"github.com/dlockgo/dlock/natslock"
)

// lockUserPermissions are the least permissions natslock needs on the
// bucket "locks", as the package documentation gives them.
const lockUserPermissions = `publish: ["$KV.locks.>", "$JS.API.INFO", "$JS.API.STREAM.INFO.KV_locks",
  "$JS.API.STREAM.CREATE.KV_locks", "$JS.API.STREAM.MSG.GET.KV_locks", "$JS.API.CONSUMER.CREATE.KV_locks.>",
  "$JS.API.CONSUMER.DELETE.KV_locks.>", "$JS.FC.KV_locks.>"]
subscribe: ["_INBOX.>"]`

// TestSecured runs the conformance suite through a user with the least
// permissions the package documentation gives, against a server that
// accepts TLS only and verifies client certificates; the user cannot
// lock in another bucket, and each wrong URL fails Open naming its cause
// without showing the password.
func TestSecured(t *testing.T) {
	const adminPassword, password = "admin-s3cret", "locks-s3cret"
	pki := testenv.NewPKI(t)
	auth := fmt.Sprintf("users: [\n  {user: admin, password: %q}\n  {user: locks, password: %q, permissions: {%s}}\n]",
		adminPassword, password, lockUserPermissions)
	c := testenv.StartNATSWith(t, 1, testenv.NATSOptions{TLS: pki, Authorization: auth, User: "admin", Password: adminPassword})
	files := "cacert=" + pki.CA + "&cert=" + pki.ClientCert + "&key=" + pki.ClientKey
	url := "nats://locks:" + password + "@" + c.URL() + "/locks?tls=true&" + files

	ctx := ctxTimeout(t, 30*time.Second)
	first, err := dlock.Open(ctx, url) // creates the bucket, as the user
	if err != nil {
		t.Fatal(err)
	}
	_ = first.Close()
	kv := admin(t, c, "locks")
	locktest.Run(t, locktest.Harness{
		NewLocker: locktest.Opener(url),
		TakeAway: func(t *testing.T, name string) {
			if err := kv.Purge(ctxTimeout(t, 10*time.Second), "mutex."+natslock.EncodeName(name)); err != nil {
				t.Fatalf("purge %q: %v", name, err)
			}
		},
		TTL: time.Second,
	})

	secrets := []string{password, adminPassword}
	host := c.URL()
	locktest.RefusesBadURLs(t, secrets, []locktest.BadURL{
		{What: "another bucket", URL: strings.Replace(url, "/locks?", "/others?", 1), Cause: "permission"},
		{What: "wrong password", URL: "nats://locks:wrong@" + host + "/locks?tls=true&" + files, Cause: "authorization"},
		{What: "no TLS", URL: "nats://locks:" + password + "@" + host + "/locks", Cause: "tls"},
		{What: "unknown CA", URL: "nats://locks:" + password + "@" + host + "/locks?tls=true&cacert=" + pki.OtherCA +
			"&cert=" + pki.ClientCert + "&key=" + pki.ClientKey, Cause: "certificate"},
		{What: "no client certificate", URL: "nats://locks:" + password + "@" + host + "/locks?tls=true&cacert=" + pki.CA, Cause: "certificate"},
		{What: "missing CA file", URL: "nats://locks:" + password + "@" + host + "/locks?tls=true&cacert=/nonexistent/ca.pem", Cause: "cacert"},
	})
}

// TestSecuredNKey opens a URL with nkey= against a server whose lock user
// is an nkey: the seed file signs the server's challenge, the user locks
// and releases, and a seed the server does not know is refused.
func TestSecuredNKey(t *testing.T) {
	const adminPassword = "admin-s3cret"
	user, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := user.PublicKey()
	seed, _ := user.Seed()
	other, _ := nkeys.CreateUser()
	otherSeed, _ := other.Seed()
	dir := t.TempDir()
	seedFile, otherFile := filepath.Join(dir, "locks.nk"), filepath.Join(dir, "other.nk")
	if err := os.WriteFile(seedFile, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(otherFile, otherSeed, 0o600); err != nil {
		t.Fatal(err)
	}
	auth := fmt.Sprintf("users: [\n  {user: admin, password: %q}\n  {nkey: %q, permissions: {%s}}\n]", adminPassword, pub, lockUserPermissions)
	c := testenv.StartNATSWith(t, 1, testenv.NATSOptions{Authorization: auth, User: "admin", Password: adminPassword})

	lockAndRelease(t, "nats://"+c.URL()+"/locks?nkey="+seedFile)
	locktest.RefusesBadURLs(t, nil, []locktest.BadURL{
		{What: "unknown nkey", URL: "nats://" + c.URL() + "/locks?nkey=" + otherFile, Cause: "authorization"},
	})
}

// TestSecuredToken opens a URL with token= against a server that takes
// a token: the token locks and releases, and a wrong token or none is
// refused, without the token in the error.
func TestSecuredToken(t *testing.T) {
	const token, wrong = "locks-t0ken-s3cret", "wrong-t0ken-s3cret"
	c := testenv.StartNATSWith(t, 1, testenv.NATSOptions{Authorization: fmt.Sprintf("token: %q", token), Token: token})
	lockAndRelease(t, "nats://"+c.URL()+"/locks?token="+token)
	locktest.RefusesBadURLs(t, []string{token, wrong}, []locktest.BadURL{
		{What: "wrong token", URL: "nats://" + c.URL() + "/locks?token=" + wrong, Cause: "authorization"},
		{What: "no token", URL: "nats://" + c.URL() + "/locks", Cause: "authorization"},
	})
}

// lockAndRelease opens url twice, as two processes would: a lock one
// holds the other cannot take, and can once it is released.
func lockAndRelease(t *testing.T, url string) {
	t.Helper()
	ctx := ctxTimeout(t, 30*time.Second)
	var lockers [2]*dlock.Locker
	for i := range lockers {
		l, err := dlock.Open(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		lockers[i] = l
	}
	lease, err := lockers[0].Acquire(ctx, "orders/42")
	if err != nil {
		t.Fatal(err)
	}
	var held *dlock.HeldError
	if _, err := lockers[1].TryAcquire(ctx, "orders/42"); !errors.As(err, &held) {
		t.Fatalf("TryAcquire of a held lock: %v, want a *dlock.HeldError", err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	second, err := lockers[1].TryAcquire(ctx, "orders/42")
	if err != nil {
		t.Fatalf("TryAcquire after the release: %v", err)
	}
	if err := second.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
