package natslock_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/internal/testenv"
	"github.com/dlockgo/dlock/locktest"
)

// lockUserPublish and lockUserSubscribe are the least permissions
// natslock needs on the bucket "locks", as the package documentation gives
// them; lockUserPermissions is their server configuration form.
var (
	lockUserPublish = []string{"$KV.locks.>", "$JS.API.INFO", "$JS.API.STREAM.INFO.KV_locks",
		"$JS.API.STREAM.CREATE.KV_locks", "$JS.API.STREAM.MSG.GET.KV_locks", "$JS.API.CONSUMER.CREATE.KV_locks.>",
		"$JS.API.CONSUMER.DELETE.KV_locks.>", "$JS.FC.KV_locks.>"}
	lockUserSubscribe   = []string{"_INBOX.>"}
	lockUserPermissions = "publish: " + confList(lockUserPublish) + "\nsubscribe: " + confList(lockUserSubscribe)
)

// confList writes subjects as a server configuration's list.
func confList(subjects []string) string {
	q := make([]string, len(subjects))
	for i, s := range subjects {
		q[i] = strconv.Quote(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

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

	runAsUser(t, c, url)

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
	user, pub := newKey(t, nkeys.CreateUser)
	seed, _ := user.Seed()
	other, _ := newKey(t, nkeys.CreateUser)
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

// TestSecuredCreds runs the conformance suite through creds= against a
// server in operator (decentralised JWT) mode, as a user whose JWT grants
// the least permissions the package documentation gives; the user cannot
// lock in another bucket, and a user of an account the server does not
// know is refused.
func TestSecuredCreds(t *testing.T) {
	dir := t.TempDir()
	config, account := operatorMode(t)
	adminCreds := userCreds(t, dir, "admin", account, nil)
	c := testenv.StartNATSWith(t, 1, testenv.NATSOptions{Config: config, Creds: adminCreds})
	lockCreds := userCreds(t, dir, "locks", account, &jwt.Permissions{
		Pub: jwt.Permission{Allow: lockUserPublish},
		Sub: jwt.Permission{Allow: lockUserSubscribe},
	})
	url := "nats://" + c.URL() + "/locks?creds=" + lockCreds

	runAsUser(t, c, url)

	unknown, _ := newKey(t, nkeys.CreateAccount)
	strangerCreds := userCreds(t, dir, "stranger", unknown, nil)
	locktest.RefusesBadURLs(t, nil, []locktest.BadURL{
		{What: "another bucket", URL: strings.Replace(url, "/locks?", "/others?", 1), Cause: "permission"},
		{What: "unknown account", URL: "nats://" + c.URL() + "/locks?creds=" + strangerCreds, Cause: "authorization"},
	})
}

// operatorMode returns a server configuration in operator (decentralised
// JWT) mode: an operator, its system account, and the account it returns,
// whose JWT enables JetStream without limits; the server knows both
// accounts' JWTs from the start (a MEMORY resolver).
func operatorMode(t *testing.T) (config string, account nkeys.KeyPair) {
	t.Helper()
	opKey, opPub := newKey(t, nkeys.CreateOperator)
	_, sysPub := newKey(t, nkeys.CreateAccount)
	acctKey, acctPub := newKey(t, nkeys.CreateAccount)

	oc := jwt.NewOperatorClaims(opPub)
	oc.Name = "dlock-test"
	oc.SystemAccount = sysPub
	sc := jwt.NewAccountClaims(sysPub)
	sc.Name = "SYS"
	ac := jwt.NewAccountClaims(acctPub)
	ac.Name = "LOCKS"
	ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
	sign := func(c jwt.Claims) string { // by the operator
		s, err := c.Encode(opKey)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	config = fmt.Sprintf("operator: %q\nsystem_account: %s\nresolver: MEMORY\nresolver_preload: {\n  %s: %q\n  %s: %q\n}",
		sign(oc), sysPub, acctPub, sign(ac), sysPub, sign(sc))
	return config, acctKey
}

// newKey makes a key pair with create and returns it and its public key.
func newKey(t *testing.T, create func() (nkeys.KeyPair, error)) (nkeys.KeyPair, string) {
	t.Helper()
	kp, err := create()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	return kp, pub
}

// userCreds writes the .creds file of a new user of account, with
// permissions (nil: all), signed by account, and returns its path.
func userCreds(t *testing.T, dir, name string, account nkeys.KeyPair, permissions *jwt.Permissions) string {
	t.Helper()
	user, pub := newKey(t, nkeys.CreateUser)
	seed, _ := user.Seed()
	uc := jwt.NewUserClaims(pub)
	uc.Name = name
	if permissions != nil {
		uc.Permissions = *permissions
	}
	userJWT, err := uc.Encode(account)
	if err != nil {
		t.Fatal(err)
	}
	creds, err := jwt.FormatUserConfig(userJWT, seed)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name+".creds")
	if err := os.WriteFile(path, creds, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// runAsUser runs the conformance suite on the bucket "locks" through
// url, which the user creates; the takeaways purge keys as c's admin.
func runAsUser(t *testing.T, c *testenv.NATSCluster, url string) {
	t.Helper()
	first, err := dlock.Open(ctxTimeout(t, 30*time.Second), url)
	if err != nil {
		t.Fatal(err)
	}
	_ = first.Close()
	runSuite(t, admin(t, c, "locks"), locktest.Opener(url))
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
